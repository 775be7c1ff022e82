# Template rendering's shape: ERB compiles a template to Ruby and evals it in
# one binding, again and again, and every eval that makes a new local variable
# adds an environment to the binding's chain. A block evaluated there finds
# its method entry only at the end of that chain: 10, 20 and 50 environments
# down here, with define_method, instance_exec and method_missing on the way.
require_relative 'oracle'

class Page
  def initialize(levels) = @levels = levels

  def render(&inner)
    b = binding
    @levels.times { |i| eval("v#{i} = #{i}", b) }
    eval('[0].each { |_| inner.call }', b)
  end
end

class Layout
  define_method(:wrap) { |&blk| instance_exec(&blk) }

  def method_missing(name, *args, &blk)
    return super unless name == :section
    Page.new(args[0]).render(&blk)
  end

  def respond_to_missing?(*) = true
end

Layout.new.wrap do
  section(10) do
    section(20) do
      section(50) { Oracle.park(ready: true) }
    end
  end
end
