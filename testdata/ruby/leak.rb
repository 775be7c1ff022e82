# frozen_string_literal: true
# A leak beside churn, for `rubyperf heap --diff` and the live heap by
# allocation site: Cache#remember keeps every LeakedRecord it makes, while
# Report#render makes ten times as many short-lived strings and arrays.
#
#   ruby leak.rb [SECONDS]     runs for SECONDS (default: until killed)
class LeakedRecord
  def initialize(i) = @i = i
end

class Cache
  def initialize = @kept = []
  def remember(n) = n.times { |i| @kept << LeakedRecord.new(i) }
end

class Report
  def render(n) = n.times.map { |i| ["row #{i}", i.to_s * 3] }.size
end

cache = Cache.new
report = Report.new
STDOUT.puts "ready"
STDOUT.flush
stop = ARGV[0] && Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0])
until stop && Process.clock_gettime(Process::CLOCK_MONOTONIC) > stop
  cache.remember(20)
  report.render(100)
  sleep 0.001
end
