# Spins in first_image for ARGV[1] seconds, then execs ARGV[0]: a Ruby (with
# ARGV[2] as its -e program) or any other program (ARGV[2..] its arguments).
def first_image(secs)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < secs
end
first_image(Float(ARGV[1]))
exec(ARGV[0], *ARGV[2..])
