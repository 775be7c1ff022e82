# The benchmark's switch-heavy target: three threads sharing the GVL, each
# doing a known share of CPU-bound work in short slices and handing the GVL
# on after each (Thread.pass), so that they leave and take a CPU thousands of
# times a second, each time a sample under record --wall. It times its own
# work with CLOCK_MONOTONIC, like workload.rb:
#
#   ruby threads.rb ITERATIONS
#
# prints "begin" when the work starts, then one line when it ends:
# "SECONDS CPU_SECONDS VOLUNTARY INVOLUNTARY 0": the work's duration, the CPU
# time the process was charged for it, and the context switches of its
# threads meanwhile (the last field is workload.rb's stackprof samples).
iterations = Integer(ARGV.fetch(0))
THREADS = 3
SLICE = 20 # fib(12) per slice, then the GVL goes to the next thread

def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)

def slice
  SLICE.times { fib(12) }
end

def work(slices)
  slices.times do
    slice
    Thread.pass
  end
end

# This thread's context switches so far.
def switches
  status = File.read('/proc/thread-self/status')
  %w[voluntary_ctxt_switches nonvoluntary_ctxt_switches].map { |k| status[/^#{k}:\s*(\d+)/, 1].to_i }
end

slices = [1, iterations / SLICE / THREADS].max
$stdout.puts 'begin'
$stdout.flush
sw = switches
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
threads = Array.new(THREADS) do
  Thread.new do
    s = switches
    work(slices)
    switches.zip(s).map { |a, b| a - b }
  end
end
counts = threads.map(&:value)
took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
vol, invol = (counts + [switches.zip(sw).map { |a, b| a - b }]).transpose.map(&:sum)
puts format('%.6f %.6f %d %d 0', took, cpu, vol, invol)
