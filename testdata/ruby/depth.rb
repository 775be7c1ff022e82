# Recurses to depth ARGV[0] (default 10), prints "ready", and spins there:
# a constant, on-CPU Ruby stack of a known depth.
def down(n)
  if n <= 1
    STDOUT.puts 'ready'
    STDOUT.flush
    nil while true
  else
    down(n - 1)
  end
end

down(Integer(ARGV[0] || 10))
