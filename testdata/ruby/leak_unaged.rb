# frozen_string_literal: true
# Leaks of objects without write barriers, which the GC never ages: Clock
# keeps every Time it takes (such an object up to Ruby 3.2) and Pool every
# Fiber it makes (in every Ruby), beside churn that makes them too. Prints, first, the classes
# of this Ruby whose objects have no write barriers, and those of them a GC
# keeps marked once kept, as ObjectSpace.dump tells them.
#
#   ruby leak_unaged.rb [SECONDS]     runs for SECONDS (default: until killed)
require "objspace"

class Clock
  def initialize = @times = []
  def stamp(n) = n.times { @times << Time.now }
end

class Pool
  def initialize = @fibers = []
  def spawn(n) = n.times { @fibers << Fiber.new { :done } }
end

# Churn, as many Times as Clock keeps and a Fiber among it: garbage at
# once. (Not more: each Time's malloc'd part brings the GCs closer
# together, and each GC is a read not to miss.)
class Report
  def render(n)
    Fiber.new { :discarded }
    n.times.map { |i| ["row #{i}", i.to_s * 3, (Time.now if i % 10 == 0)] }.size
  end
end

unaged = { "Time" => Time.now, "Fiber" => Fiber.new {} }.reject { |_, o| ObjectSpace.dump(o).include?('"wb_protected":true') }
STDOUT.puts "unaged #{unaged.keys.join(" ")}"
# Those that a GC keeps marked once an old object holds them (uncollectible:
# up to Ruby 3.2), which is what tells they are alive after their page's
# sweep: from 3.3 nothing does.
held = [unaged]
3.times { GC.start }
GC.start(full_mark: false)
kept = unaged.select { |_, o| ObjectSpace.dump(o).include?('"uncollectible":true') }
STDOUT.puts "uncollectible #{kept.keys.join(" ")}"
held.clear
clock = Clock.new
pool = Pool.new
report = Report.new
STDOUT.puts "ready"
STDOUT.flush
stop = ARGV[0] && Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0])
until stop && Process.clock_gettime(Process::CLOCK_MONOTONIC) > stop
  clock.stamp(10)
  pool.spawn(2)
  report.render(100)
  sleep 0.001
end
