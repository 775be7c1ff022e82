# Plain methods, blocks and nested blocks, each/map/times, class and module
# methods, a module mixed in, a Struct, and a singleton method on an object.
require_relative 'oracle'

module Mixin
  def mixed(&blk)
    [1].map { |x| blk.call(x) }
  end
end

module Util
  def self.helper
    yield
  end
end

class Base
  include Mixin

  def self.build
    new
  end
end

Point = Struct.new(:x) do
  def go(obj)
    obj.step1
  end
end

class Foo < Base
  def step1
    mixed { |_| Util.helper { nested } }
  end

  def nested
    [1].each do
      2.times do
        deeper
      end
    end
  end

  def deeper
    o = Object.new
    def o.single
      Oracle.park(ready: true)
    end
    o.single
  end
end

Point.new(1).go(Foo.build)
