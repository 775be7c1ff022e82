# frozen_string_literal: true
# A heap of known shape, and Ruby's own counts of it around a pause, for
# `rubyperf heap`'s tests.
#
#   ruby heap.rb OUT.json         counts, prints "ready", waits for a byte on
#                                 stdin, counts again, writes both to OUT
#   ruby heap.rb OUT.json churn   the same heap, then churns garbage forever
#                                 (after "ready"); OUT gets the first counts
#   ruby heap.rb DUMP.json dump   the same heap, written by ObjectSpace.dump_all
#                                 to DUMP; then it collects what the dump
#                                 left behind, prints "ready" and waits for a
#                                 byte on stdin
#
# Between "ready" and the byte it allocates nothing, so a census taken then
# must equal the counts before and after wherever the two agree.
require "json"
require "objspace"

class HeapLeaf; end
class HeapNode
  def initialize(v) = @v = v
end
class HeapBasic < BasicObject; end
HeapPoint = Struct.new(:x, :y)
class HeapWide # more instance variables than its slot holds
  def initialize(v) = 20.times { |i| instance_variable_set(:"@v#{i}", v) }
end
class HeapComplex # so many orders of its variables that its shape is too complex (3.2+)
  def initialize(v) = (v % 40).times { |i| instance_variable_set(:"@w#{(i * 7 + v) % 40}", v) }
end

$keep = []
20_000.times do |i|
  $keep << HeapLeaf.new
  $keep << HeapNode.new(i) if i % 2 == 0
  $keep << "str#{i}" if i % 3 == 0
  $keep << [i, i] if i % 4 == 0
  $keep << { i => i } if i % 7 == 0
  $keep << HeapPoint.new(i, i) if i % 5 == 0
  $keep << HeapBasic.new if i % 11 == 0
  $keep << (i.to_f + 0.5) * 1e300 if i % 13 == 0 # heap floats
  next unless i % 50 == 0
  # Strings and arrays with buffers of their own, shared and not, for
  # ObjectSpace.memsize_of.
  big = "y" * (1000 + i % 7)
  $keep << big << big[10, 900] << String.new(capacity: 3000 + i) << ("ab" * 300).encode("UTF-16LE")
  list = Array.new(100 + i % 9, i)
  $keep << list << list[5..] << [i] * 40
  $keep << (1..(9 + i % 200)).to_h { |k| [k, i] } << { a: i } # st and ar tables
  $keep << HeapWide.new(i) << HeapComplex.new(i) << HeapComplex.new(i + 1)
end
single = Object.new
def single.only_me = 1 # an object with a singleton class: still an Object
$keep << single << Class.new(HeapLeaf).new << Module.new

KLASS = Kernel.instance_method(:class)
# BOOK holds the hashes the counting fills, which grow while they are
# counted: their memsize is summed apart, as they are when the census runs.
BOOK = []
MEMSIZE = [String, Array, Hash, HeapWide, HeapComplex]
def tally(into, memsize)
  ObjectSpace.each_object do |o|
    k = KLASS.bind_call(o)
    into[k] += 1
    next if BOOK.any? { |b| b.equal?(o) }
    memsize[k.name] += ObjectSpace.memsize_of(o) if MEMSIZE.include?(k)
  end
end

before_types = {}
after_types = {}
before_classes = Hash.new(0)
after_classes = Hash.new(0)
before_memsize = MEMSIZE.to_h { |k| [k.name, 0] }
after_memsize = MEMSIZE.to_h { |k| [k.name, 0] }
buf = String.new(capacity: 16)
out = File.open(ARGV.fetch(0), "w")
churn = ARGV[1] == "churn"
names = ->(h) { h.each_with_object(Hash.new(0)) { |(k, n), o| o[k.name] += n if k.name } }
BOOK.push(before_types, after_types, before_classes, after_classes, before_memsize, after_memsize)

if ARGV[1] == "dump"
  GC.start
  GC.disable
  dump = ObjectSpace.dump_all(output: :string) # one String: a file would cost one a write
  File.binwrite(ARGV[0], dump)
  dump.clear # its buffer, should the String itself outlive the GC below (a stale stack slot)
  dump = nil
  GC.enable
  GC.start # the dump's String and the garbage of writing it
  GC.disable
  STDOUT.syswrite("ready\n")
  STDIN.sysread(1, buf)
  exit!(0)
end

GC.start
GC.disable unless churn
ObjectSpace.count_objects(after_types) # the keys, made before the pause
tally(before_classes, before_memsize)
ObjectSpace.count_objects(before_types)
book = BOOK.sum { |b| ObjectSpace.memsize_of(b) } # as the census finds them
STDOUT.syswrite("ready\n")

if churn
  out.write(JSON.generate({ types: before_types, classes: names.(before_classes), memsize: before_memsize }))
  out.close
  loop { 200.times.map { |i| "garbage #{i}" * 2 }; [1] * 100 }
end

STDIN.sysread(1, buf)
ObjectSpace.count_objects(after_types)
tally(after_classes, after_memsize)
out.write(JSON.generate({
  before: { types: before_types, classes: names.(before_classes), memsize: before_memsize },
  after: { types: after_types, classes: names.(after_classes), memsize: after_memsize },
  book: book,
}))
out.close
