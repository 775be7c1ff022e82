# Names a target chooses, holding what a terminal or a line-based reader
# would misread: a class named with set_temporary_name (Ruby 3.3+), code
# eval'd under a file name, and a thread's name (its comm), with newlines,
# an OSC escape sequence (which sets a terminal's title), a CSI one, a tab
# and a NUL where Ruby allows one. A thread so named spins in those frames
# until killed; "ready" is printed once it runs.
EVIL_PATH = "evil\n\e]0;pwned\a\tpath.rb"
EVIL_CLASS = "Fake\n\e]0;pwned\a\x00<Klass>"
EVIL_THREAD = "w\e[2J\nx"

klass = Class.new
klass.set_temporary_name(EVIL_CLASS) if klass.respond_to?(:set_temporary_name)

eval(<<~RUBY, binding, EVIL_PATH, 1)
  def klass.spin_evil(started)
    started << true
    i = 0
    loop { i += 1 }
  end
RUBY

started = Queue.new
worker = Thread.new do
  Thread.current.name = EVIL_THREAD
  klass.spin_evil(started)
end
started.pop
STDOUT.puts "ready"
STDOUT.flush
worker.join
