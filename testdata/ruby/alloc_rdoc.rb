# A real application allocating, counted exactly by Ruby itself: RDoc
# (Ruby's own documentation generator, 30 to 66 frames deep) documents
# its own sources ROUNDS times, inside RubyperfOracle.count_allocations
# (testdata/ruby/oracle_ext, on the load path: `ruby -I DIR`), which sees
# every object allocated through the allocator's own event and counts it
# as stackprof's :object mode at interval 1 does. Usage:
#   ruby alloc_rdoc.rb COUNTS.json OUTDIR [SECONDS [ROUNDS]]
# It waits SECONDS (default none) before it starts. A Ruby whose heap pages
# hold fewer than 1,000 objects (3.1's hold 409, 3.3's 1,638) refills its
# allocation cache four times as often, so a profiler that watches a fixed
# number of refills a second sees fewer of its windows a round: it documents
# twice the ROUNDS.
# COUNTS.json: {"objects": N, "methods": {label: [self, total]}, "classes":
# {name: objects}}, each method's total counted once per allocation whatever
# its recursion.
require 'rdoc'
require 'json'
require 'rubyperf_oracle'

counts, out, wait, rounds = ARGV
rounds = (rounds || 1).to_i
rounds *= 2 if GC::INTERNAL_CONSTANTS[:HEAP_PAGE_OBJ_LIMIT] < 1000
sleep(wait.to_f) # for a profiler outside to attach first
src = File.dirname($LOADED_FEATURES.find { |f| f.end_with?('/rdoc.rb') }) + '/rdoc'
res = RubyperfOracle.count_allocations do
  rounds.times do |i|
    RDoc::RDoc.new.document(['--quiet', '-o', "#{out}/#{i}", '--force-output', '-f', 'ri', src])
  end
end
File.write(counts, JSON.dump(res))
