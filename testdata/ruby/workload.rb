# The bundled workload: CPU-bound Ruby with a recognisable stack, on the
# main thread and a worker thread. Runs for ARGV[0] seconds (default: until
# killed) and prints "ready" once both threads run.
require 'json'

module Fib
  def self.fib(n)
    n < 2 ? n : fib(n - 1) + fib(n - 2)
  end
end

class Report
  def initialize(rows)
    @rows = rows
  end

  def render
    @rows.map { |r| format_row(r) }.join("\n")
  end

  def format_row(r)
    r.map { |c| c.to_s.rjust(6) }.join('|')
  end
end

class Workload
  def step
    [18, 20].each { |n| Fib.fib(n) }
    Report.new(Array.new(40) { |i| [i, i * i, i * 3] }).render
  end

  def serialize
    JSON.generate((1..300).map { |i| { id: i, name: "item#{i}", tags: %w[a b c] } })
  end
end

deadline = ARGV[0] ? Time.now + ARGV[0].to_f : nil
w = Workload.new
worker = Thread.new do
  Thread.current.name = 'serializer'
  loop { w.serialize; break if deadline && Time.now > deadline }
end
STDOUT.puts 'ready'
STDOUT.flush
loop do
  w.step
  break if deadline && Time.now > deadline
end
worker.join
