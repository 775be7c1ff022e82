# A deep stack that re-enters the interpreter natively at every level, the
# shape of a real block-heavy application: methods, blocks passed to C
# methods (each, map, times, tap, Hash#each), send, define_method and
# instance_exec, 60 Ruby levels over ~40 native re-entries, with a leaf that
# allocates (strings, arrays, sorting) so GC runs too. ARGV: seconds of CPU.
# It prints "ready" once warm.
seconds = Float(ARGV.fetch(0, '5'))

class Deep
  define_method(:via_define) { |n, &blk| descend(n - 1, &blk) }

  def descend(n, &blk)
    return leaf if n <= 0
    case n % 6
    when 0 then [n].each { |m| descend(m - 1, &blk) }
    when 1 then 1.times { descend(n - 1, &blk) }
    when 2 then { n => 1 }.each { |k, _| descend(k - 1, &blk) }
    when 3 then send(:via_define, n, &blk)
    when 4 then instance_exec(n) { |m| descend(m - 1, &blk) }
    else [n].map { |m| descend(m - 1, &blk) }.first
    end
  end

  def leaf
    s = +''
    200.times { |i| s << (i * 7919 % 97).to_s }
    s.tr('0-4', 'a-e').chars.sort.join.hash
  end
end

d = Deep.new
d.descend(60)
$stdout.puts 'ready'
$stdout.flush
t0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t0 < seconds
  d.descend(60)
end
