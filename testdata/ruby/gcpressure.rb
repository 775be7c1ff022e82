# CPU work under GC pressure: string churn, and a major GC every 10 ms of
# CPU (at least 50 a CPU-second on every Ruby, whatever its own heuristics
# make of the churn). The code that runs lives as long as the program, as
# an application's does, though the GC runs hundreds of times a second:
# methods, blocks, and blocks compiled once in a binding 10, 20 and 50
# environments deep (a template compiled once and rendered again and
# again). ARGV[0]: seconds of CPU to run (default: until killed). On exit
# it prints the major GCs it ran per CPU-second, as JSON, on stdout or into
# the file ARGV[1].
class Tokenizer
  def initialize = @cache = {}

  def token(i)
    s = "tok#{i}" * 20
    @cache[i % 5000] = s
    s.upcase
  end
end

class Churn
  GC_EVERY = 0.01

  def initialize
    @tok = Tokenizer.new
    @last_gc = cpu
  end

  def cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)

  def step
    200.times { |i| @tok.token(i) }
    return if cpu - @last_gc < GC_EVERY
    GC.start
    @last_gc = cpu
  end
end

class Template
  def initialize(levels, churn)
    b = binding
    levels.times { |i| eval("v#{i} = #{i}", b) }
    @body = eval('proc { [0].each { |_| 5.times { churn.step } } }', b)
  end

  def render = @body.call
end

def plain(churn) = 5.times { churn.step }

churn = Churn.new
templates = [10, 20, 50].map { |n| Template.new(n, churn) }
limit = ARGV[0] && Float(ARGV[0])
start = churn.cpu
majors = GC.stat(:major_gc_count)
loop do
  templates.each(&:render)
  plain(churn)
  break if limit && churn.cpu - start > limit
end
cpu = churn.cpu - start
report = %({"major_gcs_per_cpu_second": #{((GC.stat(:major_gc_count) - majors) / cpu).round(1)}})
ARGV[1] ? File.write(ARGV[1], report) : puts(report)
