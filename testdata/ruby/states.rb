# Workloads in which one thread state dominates, each printing at its end,
# as one JSON line, what it knows it did (tests compare rubyperf's states
# with it):
#
#   ruby states.rb gc SECONDS     one thread allocating: GC time from GC.stat(:time)
#   ruby states.rb gvl SECONDS    three CPU-bound threads sharing the GVL: each one's CPU time
#   ruby states.rb block SECONDS  a thread sleeping and one reading a pipe: the time each waited
#   ruby states.rb mixed SECONDS  all of these at once (for pictures): two spinning threads, a
#                                 sleeping one, one reading a pipe, one allocating
require "json"

mode = ARGV.fetch(0)
seconds = Float(ARGV.fetch(1, "3"))
$stdout.sync = true

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
def cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)

module States
  def self.churn(n)
    Array.new(n) { |i| [i.to_s, { i => "x" * (i % 64) }] }
  end

  def self.spin(deadline)
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    x
  end

  def self.nap(deadline)
    slept = 0.0
    while (t = Process.clock_gettime(Process::CLOCK_MONOTONIC)) < deadline
      sleep 0.05
      slept += Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    end
    slept
  end

  def self.drain(io)
    waited = 0.0
    loop do
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      IO.select([io])
      waited += Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
      break if io.read_nonblock(4096, exception: false).nil?
    end
    waited
  end
end

# What is measured starts once a recorder started with the command has
# attached (it reads the binary's DWARF first: up to half a second).
sleep 1
start = now
case mode
when "gc"
  gc0, cpu0 = GC.stat(:time), cpu
  deadline = start + seconds
  States.churn(20_000) while now < deadline
  puts JSON.generate(mode: mode, tid: File.read("/proc/thread-self/stat").split.first.to_i,
                     gc_ms: GC.stat(:time) - gc0, cpu_ms: ((cpu - cpu0) * 1000).round)
when "gvl"
  deadline = start + seconds
  threads = 3.times.map do |i|
    Thread.new do
      Thread.current.name = "spin#{i}"
      c0, w0 = cpu, now
      States.spin(deadline)
      { name: "spin#{i}", cpu_ms: ((cpu - c0) * 1000).round, wall_ms: ((now - w0) * 1000).round }
    end
  end
  puts JSON.generate(mode: mode, threads: threads.map(&:value))
when "block"
  r, w = IO.pipe
  deadline = start + seconds
  sleeper = Thread.new { Thread.current.name = "sleeper"; States.nap(deadline) }
  reader = Thread.new { Thread.current.name = "reader"; States.drain(r) }
  while now < deadline
    sleep 0.3
    w.write("x")
  end
  w.close
  puts JSON.generate(mode: mode, slept_ms: (sleeper.value * 1000).round, waited_ms: (reader.value * 1000).round)
when "mixed"
  r, w = IO.pipe
  deadline = start + seconds
  threads = [
    Thread.new { Thread.current.name = "spinner"; States.spin(deadline) },
    Thread.new { Thread.current.name = "allocator"; States.churn(20_000) while now < deadline },
    Thread.new { Thread.current.name = "sleeper"; States.nap(deadline) },
    Thread.new { Thread.current.name = "reader"; States.drain(r) },
  ]
  while now < deadline
    sleep 0.3
    w.write("x")
  end
  w.close
  threads.each(&:join)
  puts JSON.generate(mode: mode)
else
  abort "usage: ruby states.rb gc|gvl|block|mixed SECONDS"
end
