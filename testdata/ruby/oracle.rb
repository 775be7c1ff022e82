# Ruby's own answer for the frames of the calling thread: rb_profile_frames
# with rb_profile_frame_full_label, rb_profile_frame_path and the lines it
# returns. They are called through the small C extension in oracle_ext/ when
# it is on the load path (the tests build it for each Ruby that has its
# headers: `ruby -I DIR`), else through Fiddle (a default gem up to 3.4, a
# bundled gem from 4.0 that offline builds lack). Scenario scripts call
# Oracle.park, which prints that answer as one JSON line and sleeps on the
# same line, so the parked stack is the answer with Kernel#sleep on top.
require 'json'

module Oracle
  MAX = 8192
  OUT = Mutex.new

  begin
    require 'rubyperf_oracle'

    # [[label, path, line], ...] leaf first, and the object at an address.
    def self.raw_frames = RubyperfOracle.frames(MAX)
    def self.object_at(address) = RubyperfOracle.object_at(address)
  rescue LoadError
    require 'fiddle'
    VP = Fiddle::TYPE_VOIDP
    H = Fiddle::Handle::DEFAULT
    PROFILE_FRAMES = Fiddle::Function.new(H['rb_profile_frames'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT, VP, VP], Fiddle::TYPE_INT, need_gvl: true)
    FULL_LABEL = Fiddle::Function.new(H['rb_profile_frame_full_label'], [VP], VP, need_gvl: true)
    PATH = Fiddle::Function.new(H['rb_profile_frame_path'], [VP], VP, need_gvl: true)

    # Fiddle releases the GVL unless need_gvl: these allocate, and raced other threads (heap corruption, seen
    # under YJIT). A label is a new string only Fiddle's integer holds until dlunwrap: a GC in between (the
    # next call allocates) would free it and crash later (seen in JSON.generate), so GC waits.
    def self.raw_frames
      was_disabled = GC.disable
      buf = Fiddle::Pointer.malloc(8 * MAX)
      lines = Fiddle::Pointer.malloc(4 * MAX)
      n = PROFILE_FRAMES.call(0, MAX, buf, lines)
      values = buf[0, 8 * n].unpack('Q*')
      lns = lines[0, 4 * n].unpack('l*')
      values.zip(lns).map do |v, line|
        [Fiddle.dlunwrap(FULL_LABEL.call(v).to_i), Fiddle.dlunwrap(PATH.call(v).to_i), line]
      end
    ensure
      GC.enable unless was_disabled
    end

    def self.object_at(address) = Fiddle.dlunwrap(address)
  end

  # Where Ruby prints an address, rubyperf prints a stable name. The object
  # at that address says which, through Ruby's own reflection.
  def self.stable(obj)
    case obj
    when Class
      return obj.name if obj.name
      obj.superclass ? "#<anonymous subclass of #{stable(obj.superclass)}>" : '#<anonymous class>'
    when Module
      return obj.name if obj.name
      if obj.inspect =~ /\A#<refinement:(.+)@(.+)>\z/
        "#<refinement #{$1} of #{$2}>"
      else
        '#<anonymous module>'
      end
    else
      "#<instance of #{stable(obj.class)}>"
    end
  end

  # A temporary path names the object's class, itself perhaps temporary:
  # "#<#<Class:0x...>:0x...>" (4.0 names a refinement so). The outermost
  # address is the object named.
  TEMPORARY_PATH = /(?<path>#<(?:[A-Za-z0-9_:]+|\g<path>):0x\h+>)/

  def self.normalize(label)
    label.gsub(TEMPORARY_PATH) { |path| stable(object_at(path[/:0x(\h+)>\z/, 1].to_i(16))) }
  end

  def self.frames
    all = raw_frames.map do |label, path, line|
      { label: label && normalize(label), path: path, line: line }
    end
    # Drop the frames above Oracle.park (the call into Ruby, Oracle.frames):
    # when parked, Kernel#sleep is there instead.
    park = all.index { |f| f[:label] == 'Oracle.park' } or raise 'Oracle.park not on the stack'
    [{ label: 'Kernel#sleep', path: nil, line: 0 }] + all[park..]
  end

  def self.emit(frames, ready, notify)
    OUT.synchronize do
      STDOUT.puts JSON.generate(tid: Thread.current.native_thread_id, frames: frames)
      STDOUT.puts 'ready' if ready
      STDOUT.flush
    end
    notify&.push(true)
  end

  # With RUBYPERF_SPIN=1 a parked thread spins in place instead of sleeping,
  # so CPU sampling sees it on the same stack (its top frame is Oracle.park).
  SPIN = ENV['RUBYPERF_SPIN'] == '1'

  # Keep `frames`, `emit` and `sleep` on one line: the answer's line for
  # this frame must be the parked line.
  def self.park(ready: false, notify: nil)
    f = frames; emit(f, ready, notify); (nil while SPIN); sleep
  end
end

# Last, so that the lines above (in golden files) stay put.
if (jit = ENV['RUBYPERF_EXPECT_JIT']) && !(RubyVM.const_defined?(jit.upcase) && RubyVM.const_get(jit.upcase).enabled?)
  abort "oracle.rb: RUBYPERF_EXPECT_JIT=#{jit} but #{jit.upcase} is off"
end
