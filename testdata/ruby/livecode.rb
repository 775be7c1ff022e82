# Code that is live while the GC runs: files required one after another
# (each one's top level builds young objects a while, so that GCs run
# while its frame is on the stack) and templates compiled and rendered by
# eval, a new iseq each render, as ERB#result does. Usage: livecode.rb DIR
# SECONDS: the files to require are DIR/part_N.rb (written by the test).
dir, seconds = ARGV[0], Float(ARGV[1])
$LOAD_PATH.unshift(dir)

def render(n, items)
  src = "out = []\nitems.each do |x|\n  out << \"#{n}:\#{x}\" << x.to_s * 3\nend\nout.size\n"
  eval(src, binding, "(template #{n})", 1)
end

deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
n = 0
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  n += 1
  require "part_#{n}" if File.exist?(File.join(dir, "part_#{n}.rb"))
  render(n, (1..20_000).to_a)
end
