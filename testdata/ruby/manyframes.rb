# A hostile shape for a profiler's memory: as many cheap, distinct, long
# frame names as a Ruby can make. ARGV[0]: seconds to run (default 60);
# ARGV[1]: classes (default 8). Prints "ready" once set up.
#
# Each class has a name of 4 KB and a method of 20,000 lines, each line a
# distinct call site, eval'd with a file path of 4 KB: every (class, line)
# is another frame name of 8 KB. The method recurses 2,040 deep (just under
# the 2,048 frames a sample holds), each level entering another class at a
# random line, so nearly every sample brings frames never seen before. A
# new class replaces an old one every 3 s (churn: code freed, new code
# at reused addresses).
$stdout.sync = true
seconds = Float(ARGV[0] || 60)
count = Integer(ARGV[1] || 8)
LINES = 20_000
DEPTH = 2_040

# branch writes a binary search over k in lo...hi whose every leaf is a
# line of its own: a call site (a case of 20,000 whens nests too deep for
# the parser).
def branch(src, lo, hi)
  if hi - lo == 1
    src << "CLASSES[rand(CLASSES.size)].walk(d - 1, rand(LINES))\n"
    return
  end
  mid = (lo + hi) / 2
  src << "if k < #{mid}\n"
  branch(src, lo, mid)
  src << "else\n"
  branch(src, mid, hi)
  src << "end\n"
end

def make_class(i, gen)
  name = format("Hostile%04d%03d", i, gen) + "N" * 4_080
  path = "/hostile/#{i}/#{gen}/" + "p" * 4_070 + ".rb"
  klass = Class.new
  Object.const_set(name, klass)
  src = +"def self.walk(d, k)\n  return d if d <= 0\n"
  branch(src, 0, LINES)
  src << "end\n"
  klass.class_eval(src, path, 1)
  klass
end

CLASSES = Array.new(count) { |i| make_class(i, 0) }
puts "ready"
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
gen = 0
churn = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
while (now = Process.clock_gettime(Process::CLOCK_MONOTONIC)) < deadline
  CLASSES[rand(count)].walk(DEPTH, rand(LINES))
  next if now < churn
  churn = now + 3
  gen += 1
  i = rand(count)
  Object.send(:remove_const, CLASSES[i].name.to_sym)
  CLASSES[i] = make_class(i, gen % 1000)
end
