# A real application whose heap grows, with Ruby's own count of what stays
# alive by allocating method: RDoc documents directories of Ruby's library
# over and over and keeps every finished run (as a cache would), under
# ObjectSpace.trace_object_allocations. Usage:
#   ruby live_rdoc.rb COUNTS.json OUTDIR
# It prints "ready" once working. SIGUSR1: a recording starts (the GC
# count is noted); SIGUSR2: it has ended (noted too). Then it stops, runs a
# GC, and writes COUNTS.json: {"objects": N, "methods": {name: objects}}
# of the objects alive that were allocated between the two, by allocating
# method ("Class#method" as ObjectSpace names it; "#name" for a method of
# an unnamed class, such as a Struct's own new).
require 'objspace'
require 'rdoc'
require 'json'

counts, out = ARGV
lib = File.dirname($LOADED_FEATURES.find { |f| f.end_with?('/rdoc.rb') })
dirs = %w[rdoc irb reline csv net rubygems].map { |d| File.join(lib, d) }.select { |d| File.directory?(d) }
abort "live_rdoc.rb: nothing to document under #{lib}" if dirs.size < 3
ObjectSpace.trace_object_allocations_start
$kept = []
$current = nil # reachable while it works, so that killing it frees nothing
$start = $end = nil
trap('USR1') { $start = GC.count }
trap('USR2') { $end = GC.count }
worker = Thread.new do
  i = 0
  loop do
    $current = RDoc::RDoc.new
    $current.document(['--quiet', '--force-output', '-o', "#{out}/#{i % 4}", dirs[i % dirs.size]]) rescue nil
    $kept << $current
    i += 1
  end
end
STDOUT.puts 'ready'
STDOUT.flush
sleep 0.01 until $start && $end
worker.kill
worker.join
GC.start
methods = Hash.new(0)
objects = 0
ObjectSpace.each_object do |o|
  g = ObjectSpace.allocation_generation(o) or next
  next if g < $start || g > $end
  methods["#{ObjectSpace.allocation_class_path(o)}##{ObjectSpace.allocation_method_id(o)}"] += 1
  objects += 1
end
File.write(counts, JSON.dump(objects: objects, methods: methods))
