# The benchmark's target: CPU-bound Ruby at a fixed stack depth, timing its
# own work with CLOCK_MONOTONIC so a profiler's start-up and shutdown are not
# counted against it.
#
#   ruby workload.rb DEPTH ITERATIONS
#
# prints "begin" when the work starts, then one line when it ends:
# "SECONDS CPU_SECONDS VOLUNTARY INVOLUNTARY SAMPLES": the work's duration,
# the CPU time the process was charged for it (a profiler's kernel work on
# its behalf included), its context switches meanwhile, and, when
# BENCH_STACKPROF_HZ is set, the samples stackprof (cpu mode at that rate)
# took of it (else 0).
depth = Integer(ARGV.fetch(0))
iterations = Integer(ARGV.fetch(1))

def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)

def leaf(iterations)
  acc = 0
  iterations.times do |i|
    acc += fib(12)
    acc ^= i.to_s.length
  end
  acc
end

def descend(depth, iterations)
  depth <= 1 ? leaf(iterations) : descend(depth - 1, iterations)
end

def switches
  status = File.read('/proc/self/status')
  %w[voluntary_ctxt_switches nonvoluntary_ctxt_switches].map { |k| status[/^#{k}:\s*(\d+)/, 1].to_i }
end

if (hz = ENV['BENCH_STACKPROF_HZ'])
  require 'stackprof'
  StackProf.start(mode: :cpu, interval: (1_000_000 / Integer(hz)).to_i, raw: true)
end
$stdout.puts 'begin'
$stdout.flush
sw = switches
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
descend(depth, iterations)
took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
vol, invol = switches.zip(sw).map { |a, b| a - b }
samples = 0
if hz
  StackProf.stop
  samples = StackProf.results[:samples]
end
puts format('%.6f %.6f %d %d %d', took, cpu, vol, invol, samples)
