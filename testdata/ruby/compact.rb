# Code that moves: 100 pairs of methods, outer_N calling inner_N, each
# defined on lines N*10+1.. of pairs.rb; rounds call a pair at random and
# spin in it for 2 ms, and every 4th round runs GC.compact, which moves
# iseqs and method entries. A sample naming outer_N above inner_M with
# N != M, or a line outside N's block, named a moved frame wrongly. Runs
# for ARGV[0] seconds (default 3); prints "ready" once the pairs exist.
module Pairs; end
(1..100).each do |n|
  Pairs.module_eval(<<~RUBY, 'pairs.rb', n * 10 + 1)
    def self.outer_#{n}
      inner_#{n} { |x| x + 1 }
    end
    def self.inner_#{n}
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      n = 0
      n = yield(n) while Process.clock_gettime(Process::CLOCK_MONOTONIC) - started < 0.002
    end
  RUBY
end
STDOUT.puts 'ready'
STDOUT.flush
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || 3)
round = 0
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
  round += 1
  Pairs.public_send(:"outer_#{rand(1..100)}")
  GC.compact if (round % 4).zero?
end
