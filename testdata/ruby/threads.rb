# Several threads, each parked in its own stack; the main thread parks last.
require_relative 'oracle'

class Worker
  def run(k, q)
    k.even? ? even(q) : odd(q)
  end

  def even(q)
    Oracle.park(notify: q)
  end

  def odd(q)
    [1].each { Oracle.park(notify: q) }
  end
end

q = Queue.new
3.times do |i|
  Thread.new(i) do |k|
    Thread.current.name = "worker-#{k}"
    Worker.new.run(k, q)
  end
end
3.times { q.pop }
Oracle.park(ready: true)
