# CPU in known shares, for checking a profile's proportions: Shares#heavy
# spins three times as long as Shares#light, turn by turn, for ARGV[0]
# seconds (default: until killed). Prints "ready" once it runs.
class Shares
  def spin(seconds)
    stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop
    x
  end

  def heavy
    spin(0.03)
  end

  def light
    spin(0.01)
  end
end

deadline = ARGV[0] ? Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0]) : nil
s = Shares.new
STDOUT.puts 'ready'
STDOUT.flush
until deadline && Process.clock_gettime(Process::CLOCK_MONOTONIC) >= deadline
  s.heavy
  s.light
end
