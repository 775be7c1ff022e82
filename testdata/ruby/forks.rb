# The parent spins in parent_work while the child it forks spins in
# child_work, ARGV[0] seconds each (default 1.5).
def spin(secs)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < secs
end

def parent_work(secs) = spin(secs)
def child_work(secs) = spin(secs)

secs = Float(ARGV[0] || 1.5)
pid = fork { child_work(secs) }
parent_work(secs)
Process.wait(pid)
