# frozen_string_literal: true

# The allocation benchmark's target: testdata/ruby/alloc.rb's allocating
# methods, a fixed number of rounds, timed by itself like workload.rb.
#
#   ruby alloc.rb ROUNDS
#
# prints "begin" when the work starts, then "SECONDS CPU_SECONDS VOLUNTARY
# INVOLUNTARY SAMPLES" when it ends. With BENCH_STACKPROF_OBJECT=N it runs
# under stackprof's object mode (a sample every N allocations), with
# BENCH_MEMORY_PROFILER=1 under memory_profiler (every allocation); SAMPLES
# is what the profiler took (0 otherwise).
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
end

rounds = Integer(ARGV.fetch(0))
a = Alloc.new
work = lambda do
  rounds.times do
    a.objects(3000)
    a.arrays(2000)
    a.strings(1000)
    a.hashes(500)
  end
end

def switches
  status = File.read('/proc/self/status')
  %w[voluntary_ctxt_switches nonvoluntary_ctxt_switches].map { |k| status[/^#{k}:\s*(\d+)/, 1].to_i }
end

samples = 0
stackprof = ENV['BENCH_STACKPROF_OBJECT']
memprof = ENV['BENCH_MEMORY_PROFILER']
require 'stackprof' if stackprof
require 'memory_profiler' if memprof
$stdout.puts 'begin'
$stdout.flush
sw = switches
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
if stackprof
  samples = StackProf.run(mode: :object, interval: Integer(stackprof), raw: true) { work.call }[:samples]
elsif memprof
  report = MemoryProfiler.report { work.call }
  samples = report.total_allocated
else
  work.call
end
took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
vol, invol = switches.zip(sw).map { |x, y| x - y }
puts format('%.6f %.6f %d %d %d', took, cpu, vol, invol, samples)
