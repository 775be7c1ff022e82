# Calls a method millions of times a second: under YJIT, JIT code pushes a
# frame for each call, and a sample may land while it is being pushed.
module JitCalls
  def self.fib(n)
    n < 2 ? n : fib(n - 1) + fib(n - 2)
  end
end

STDOUT.puts 'ready'
STDOUT.flush
loop { JitCalls.fib(20) }
