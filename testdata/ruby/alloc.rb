# frozen_string_literal: true

# Allocates in known proportions, for allocation profiles. Each round,
# ARGV[0] frames deep (default 3): Alloc#objects makes 3000 Objects,
# Alloc#arrays 2000 Arrays, Alloc#strings 1000 Strings and Alloc#hashes 500
# Hashes. It counts what each method allocated, exactly, as Ruby counts
# (GC.stat(:total_allocated_objects) before and after each call: no other
# code allocates in between). It prints "ready" once running; on SIGUSR1
# it writes the counts so far as one line of JSON, {"objects": N, ...,
# "total": GC.stat(:total_allocated_objects)}, to the file ARGV[1] (or
# prints it); it runs until killed.
class Alloc
  def objects(n)
    i = 0
    while i < n
      Object.new
      i += 1
    end
  end

  def arrays(n)
    i = 0
    while i < n
      Array.new(2)
      i += 1
    end
  end

  def strings(n)
    i = 0
    while i < n
      String.new("abc")
      i += 1
    end
  end

  def hashes(n)
    i = 0
    while i < n
      Hash.new
      i += 1
    end
  end

  def deep(depth, &blk)
    return yield if depth <= 0

    deep(depth - 1, &blk)
  end
end

DEPTH = (ARGV[0] || 3).to_i
COUNTS = {objects: 0, arrays: 0, strings: 0, hashes: 0}
ALLOC = Alloc.new

def counted(method, n)
  before = GC.stat(:total_allocated_objects)
  ALLOC.public_send(method, n)
  COUNTS[method] += GC.stat(:total_allocated_objects) - before
end

Signal.trap("USR1") do
  line = "{" + COUNTS.map { |k, v| "\"#{k}\": #{v}" }.join(", ") +
    ", \"total\": #{GC.stat(:total_allocated_objects)}}\n"
  if ARGV[1]
    File.write(ARGV[1] + ".tmp", line)
    File.rename(ARGV[1] + ".tmp", ARGV[1])
  else
    $stdout.write(line)
    $stdout.flush
  end
end
$stdout.puts "ready"
$stdout.flush
ALLOC.deep(DEPTH) do
  loop do
    counted(:objects, 3000)
    counted(:arrays, 2000)
    counted(:strings, 1000)
    counted(:hashes, 500)
  end
end
