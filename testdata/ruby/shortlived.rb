# Runs code that is garbage a few milliseconds after it ran: each round
# evaluates a new string (a new iseq), spins in it for 3 ms, and a GC after
# each round frees the iseq of the round before, for ARGV[0] seconds
# (default 3). A profiler that names frames from the live process must read
# each new one at once.
STDOUT.puts 'ready'
STDOUT.flush
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || 3)
round = 0
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
  round += 1
  eval(<<~RUBY, binding, "round_#{round}.rb", 1)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    spins = 0
    spins += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - started < 0.003
  RUBY
  GC.start
end
