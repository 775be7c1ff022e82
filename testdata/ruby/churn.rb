# Starts and ends ARGV[0] threads (default 3000), 50 at a time, each
# running churn_work for a moment.
def churn_work
  x = 0
  20_000.times { |i| x += i }
  x
end

total = Integer(ARGV[0] || 3000)
(total / 50).times do
  50.times.map { Thread.new { churn_work } }.each(&:join)
end
