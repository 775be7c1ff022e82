# A threaded server under CPU-bound load, for the GVL's share of its
# threads' time: ARGV[0] worker threads (named "worker N") take connections
# on 127.0.0.1 (an ephemeral port, printed before "ready") from a queue fed
# by the accepting main thread; each request is one line, answered after
# about ARGV[1] ms of CPU work in Ruby (default 2), as a web app renders a
# page. Runs until killed.
require 'socket'

workers = Integer(ARGV.fetch(0, 4))
work_ms = Float(ARGV.fetch(1, 2))

def render(ms)
  t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  acc = 0
  acc += (acc * 31 + 7) % 1_000_003 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t < ms / 1000.0
  acc
end

server = TCPServer.new('127.0.0.1', 0)
queue = Queue.new
workers.times do |i|
  Thread.new do
    Thread.current.name = "worker #{i}"
    loop do
      conn = queue.pop
      begin
        while conn.gets
          conn.write("#{render(work_ms)}\n")
        end
      rescue IOError, SystemCallError
        nil
      ensure
        conn.close
      end
    end
  end
end
$stdout.puts server.addr[1]
$stdout.puts 'ready'
$stdout.flush
loop { queue << server.accept }
