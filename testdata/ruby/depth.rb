# Recurses to depth ARGV[0] (default 10), prints "ready", and spins there:
# a constant, on-CPU Ruby stack of a known depth.
#
# With ARGV[1] == "distinct" the stack is about as deep but made of distinct
# methods, every third of which calls the next inside a block passed to
# Array#each (its method, the C frame of each, the block): shaped like a
# Rack middleware chain rather than one method's recursion.
def down(n)
  if n <= 1
    STDOUT.puts 'ready'
    STDOUT.flush
    nil while true
  else
    down(n - 1)
  end
end

def distinct(frames)
  level = 0
  left = frames - 2 # the main frame and down(1) at the top
  defs = []
  while left > 0
    level += 1
    if level % 3 == 0 && left >= 3
      defs << "def level#{level} = [0].each { level#{level + 1} }"
      left -= 3
    else
      defs << "def level#{level} = level#{level + 1}"
      left -= 1
    end
  end
  defs << "def level#{level + 1} = down(1)"
  eval(defs.join("\n"))
  level1
end

depth = Integer(ARGV[0] || 10)
ARGV[1] == 'distinct' ? distinct(depth) : down(depth)
