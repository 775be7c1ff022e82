# define_method, method_missing, instance_eval, eval, an anonymous class, a
# refinement, and a frame whose $~ is set.
require_relative 'oracle'

class Dyn
  define_method(:via_define) { missing_caller }

  def missing_caller
    'ghost' =~ /gh/ # $~ turns this frame's method entry slot into an svar
    ghost
  end

  def method_missing(name, *args)
    return super unless name == :ghost
    instance_eval { evaluated }
  end

  def respond_to_missing?(*)
    true
  end

  def evaluated
    eval('anon_step')
  end

  def anon_step
    Class.new(Dyn) { def anon = Oracle.park(ready: true) }.new.anon
  end
end

module Shout
  refine String do
    def shout
      Dyn.new.via_define
    end
  end
end

using Shout
'x'.shout
