# Frames whose memory is reused: each round defines a pair of methods with
# new names by eval, outer_N calling inner_N, spins in them for 2 ms, removes
# them, and runs a GC (GC.compact every 4th round, where the Ruby has it), so
# the next round's iseqs and method entries are likely to land where the last
# round's were. A sample that names outer_N above inner_M with N != M, or a
# line not in round N's block of lines, named a frame from a stale cache.
# Runs for ARGV[0] seconds (default 3).
STDOUT.puts 'ready'
STDOUT.flush
module Rounds; end
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || 3)
compact = GC.respond_to?(:compact)
round = 0
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
  round += 1
  # Round N's code is on lines N*10+1.. of rounds.rb.
  Rounds.module_eval(<<~RUBY, 'rounds.rb', round * 10 + 1)
    def self.outer_#{round}
      inner_#{round} { |x| x + 1 }
    end
    def self.inner_#{round}
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      n = 0
      n = yield(n) while Process.clock_gettime(Process::CLOCK_MONOTONIC) - started < 0.002
    end
  RUBY
  Rounds.public_send(:"outer_#{round}")
  Rounds.singleton_class.send(:remove_method, :"outer_#{round}", :"inner_#{round}")
  compact && (round % 4).zero? ? GC.compact : GC.start
end
