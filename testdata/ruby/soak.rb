# The soak workload (scripts/soak.sh): CPU-bound Ruby on the main thread and
# a serializer thread, a thread that sleeps and wakes, one that starts
# short-lived threads, and a full GC every few seconds. Runs for ARGV[0]
# seconds and prints "ready" once its threads run.
require 'json'

module Soak
  def self.fib(n)
    n < 2 ? n : fib(n - 1) + fib(n - 2)
  end

  def self.render(rows)
    rows.map { |r| r.map { |c| c.to_s.rjust(6) }.join('|') }.join("\n")
  end

  def self.serialize
    JSON.generate((1..300).map { |i| { id: i, name: "item#{i}" } })
  end
end

deadline = Time.now + (ARGV[0] || 60).to_f
threads = []
threads << Thread.new do
  Thread.current.name = 'serializer'
  Soak.serialize until Time.now > deadline
end
threads << Thread.new do
  Thread.current.name = 'sleeper'
  until Time.now > deadline
    sleep 0.01
    Soak.fib(12)
  end
end
threads << Thread.new do
  Thread.current.name = 'spawner'
  until Time.now > deadline
    4.times.map { |i| Thread.new { Soak.fib(14 + i) } }.each(&:join)
    sleep 0.05
  end
end
STDOUT.puts 'ready'
STDOUT.flush
last_gc = Time.now
until Time.now > deadline
  Soak.fib(18)
  Soak.render(Array.new(40) { |i| [i, i * i] })
  if Time.now - last_gc > 5
    GC.start
    last_gc = Time.now
  end
end
threads.each(&:join)
