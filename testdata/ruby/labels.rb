# A workload for request-label tests: requests served on several fibers
# taking turns, each labelled through testdata/ruby/profiler_state_ext
# (which publishes labels the way the ruby-profiler gem does):
#
#   ruby labels.rb SECONDS [EXTENSION.so] [scheduler]
#
# With "scheduler" the requests run as non-blocking fibers under a Fiber
# scheduler (Fiber.set_scheduler, Fiber.schedule): each gives the thread
# on with sleep(0), which the scheduler turns into a switch to the next
# ready fiber, as an async server's fibers do at each I/O.
#
# The extension comes from ARGV[1], else ENV["RUBYPERF_PROFILER_STATE_SO"]
# (internal/profilerstate builds it). Request k is labelled
# request_id: "rk" (a new String) and endpoint: ENDPOINTS[(k - 1) % 3] (a
# Symbol); each endpoint burns a different amount of CPU in the method named
# after it (Endpoints.users, .orders, .search), in slices, yielding to the
# next fiber after each slice. The main fiber schedules them, unlabelled,
# and does some unlabelled work of its own (Background.housekeeping).
#
# At the end it prints one JSON line: the CPU seconds measured around each
# slice (CLOCK_THREAD_CPUTIME_ID), per endpoint and per request, and the
# unlabelled CPU, so tests can compare a profile's labels with them.
require "json"

so = (ARGV[1] unless ARGV[1] == "scheduler") || ENV["RUBYPERF_PROFILER_STATE_SO"]
with_scheduler = ARGV.include?("scheduler")
abort "usage: ruby labels.rb SECONDS [EXTENSION.so] (or RUBYPERF_PROFILER_STATE_SO=EXTENSION.so)" unless so
require File.expand_path(so)
seconds = Float(ARGV.fetch(0, "5"))
$stdout.sync = true

ENDPOINTS = %i[users orders search].freeze
# CPU seconds per slice: 1:2:4, so the endpoints' shares (1/7, 2/7, 4/7)
# tell them apart in any profile.
SLICE_CPU = { users: 0.001, orders: 0.002, search: 0.004 }.freeze
SLICES = 25 # per request: 25, 50 and 100 ms of CPU
FIBERS = 4  # requests in flight at once
HOUSEKEEPING_CPU = 0.0005 # per round of the scheduler

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
def cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)

# Burns about budget CPU seconds in plain Ruby code (CPU time, not a count
# of iterations, so that YJIT does not change the shares). The clock is read
# every few thousand additions only: samples land in Ruby code, below the
# caller named after what the work is for.
def burn(budget)
  deadline, x = cpu + budget, 0
  while cpu < deadline
    i = 0
    while i < 2_000
      x += i * i % 7
      i += 1
    end
  end
  x
end

module Endpoints
  def self.users(budget) = burn(budget)
  def self.orders(budget) = burn(budget)
  def self.search(budget) = burn(budget)
end

module Background
  def self.housekeeping(budget) = burn(budget)
end

# A Fiber scheduler small enough to read: ready fibers run in turn; one that
# sleeps waits for its time in a list; the loop runs until all are done.
class RoundRobin
  def initialize(between_rounds)
    @ready, @sleeping, @between_rounds = [], {}, between_rounds
  end

  def fiber(&block)
    f = Fiber.new(blocking: false, &block)
    f.resume
    f
  end

  def kernel_sleep(duration = nil)
    @sleeping[Fiber.current] = Process.clock_gettime(Process::CLOCK_MONOTONIC) + (duration || 0)
    Fiber.yield
  end

  def block(_blocker, timeout = nil)
    timeout ? kernel_sleep(timeout) : (@sleeping[Fiber.current] = Float::INFINITY; Fiber.yield)
  end

  def unblock(_blocker, fiber)
    @sleeping[fiber] = 0
  end

  def io_wait(io, events, timeout)
    IO.select(events & IO::READABLE != 0 ? [io] : nil, events & IO::WRITABLE != 0 ? [io] : nil, nil, timeout)
    events
  end

  def run
    until @sleeping.empty?
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      due = @sleeping.select { |_, at| at <= t }.keys
      due.each { |f| @sleeping.delete(f) }
      due.each { |f| f.resume if f.alive? }
      @between_rounds.call
    end
  end

  def close = run
end

# Sleeping first lets a recorder that starts with the command attach (it
# reads the binary's DWARF first) before anything is measured.
sleep 1
endpoint_cpu = ENDPOINTS.to_h { |e| [e, 0.0] }
requests = {} # request_id => {endpoint:, cpu:}
unlabeled = 0.0
served = 0
start, cpu0 = now, cpu
deadline = start + seconds

serve = lambda do
  while now < deadline
    served += 1
    id, endpoint = "r#{served}", ENDPOINTS[(served - 1) % ENDPOINTS.size]
    request = requests[id] = { endpoint: endpoint, cpu: 0.0 }
    RubyperfProfilerState.with(request_id: id, endpoint: endpoint) do
      SLICES.times do
        break if now >= deadline
        c = cpu
        Endpoints.public_send(endpoint, SLICE_CPU[endpoint])
        spent = cpu - c
        endpoint_cpu[endpoint] += spent
        request[:cpu] += spent
        # The next fiber runs with its own labels.
        with_scheduler ? sleep(0) : Fiber.yield
      end
    end
  end
end
housekeeping = lambda do
  c = cpu
  Background.housekeeping(HOUSEKEEPING_CPU)
  unlabeled += cpu - c
end

if with_scheduler
  scheduler = RoundRobin.new(housekeeping)
  Fiber.set_scheduler(scheduler)
  FIBERS.times { Fiber.schedule(&serve) }
  scheduler.run
  Fiber.set_scheduler(nil)
else
  # Round robin until every worker has seen the deadline.
  workers = Array.new(FIBERS) { Fiber.new(&serve) }
  while workers.any?(&:alive?)
    workers.each { |f| f.resume if f.alive? }
    housekeeping.call
  end
end

puts JSON.generate(
  pid: Process.pid,
  tid: File.read("/proc/thread-self/stat").split.first.to_i,
  seconds: now - start,
  cpu: cpu - cpu0,
  unlabeled_cpu: unlabeled,
  endpoint_cpu: endpoint_cpu,
  requests: requests,
  keys: { request_id: RubyperfProfilerState.id_of(:request_id), endpoint: RubyperfProfilerState.id_of(:endpoint) },
)
