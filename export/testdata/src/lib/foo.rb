# Sampled by the export package's test profile (testStacks in
# helpers_test.go) as /app/lib/foo.rb: go tool pprof -list reads it.
class Foo
  include Comparable
  attr_reader :items
  def initialize(items) = (@items = items)

  def bar
    @items.each do |x|
      x.digits.sum
    end
    s = "ab" * 100_000
    $stdout.write(s)
    self <=> Foo.new(@items.reverse)
  end

  def <=>(other)
    send(%(a;b&c" 42), other)
  end

  define_method(%(a;b&c" 42)) do |other|
    @items.sum <=> other.items.sum
  end
end
