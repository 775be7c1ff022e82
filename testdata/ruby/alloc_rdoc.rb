# A real application allocating, counted exactly by Ruby itself: RDoc
# (Ruby's own documentation generator, 30 to 66 frames deep) documents
# its own sources ROUNDS times, inside stackprof's :object mode at
# interval 1, which sees every object allocated. Usage:
#   ruby alloc_rdoc.rb COUNTS.json OUTDIR [SECONDS [ROUNDS]]
# It waits SECONDS (default none) before it starts.
# COUNTS.json: {"objects": N, "methods": {name: [self, total]}, "classes":
# {name: objects}}, each method's total counted once per allocation whatever
# its recursion; the classes as the allocator's own event saw each object
# built (testdata/ruby/oracle_ext, where it is on the load path; else null).
require 'stackprof'
require 'rdoc'
require 'json'
begin
  require 'rubyperf_oracle'
rescue LoadError
end

counts, out, wait, rounds = ARGV
sleep(wait.to_f) # for a profiler outside to attach first
src = File.dirname($LOADED_FEATURES.find { |f| f.end_with?('/rdoc.rb') }) + '/rdoc'
run = lambda do
  StackProf.run(mode: :object, interval: 1, raw: false) do
    (rounds || 1).to_i.times do |i|
      RDoc::RDoc.new.document(['--quiet', '-o', "#{out}/#{i}", '--force-output', '-f', 'ri', src])
    end
  end
end
res = classes = nil
if defined?(RubyperfOracle)
  classes = RubyperfOracle.count_classes { res = run.call }
else
  res = run.call
end
methods = Hash.new { |h, k| h[k] = [0, 0] }
res[:frames].each_value do |f|
  m = methods[f[:name]]
  m[0] += f[:samples]
  m[1] += f[:total_samples]
end
File.write(counts, JSON.dump(objects: res[:samples], methods: methods, classes: classes))
