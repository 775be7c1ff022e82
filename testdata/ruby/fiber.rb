# A fiber: the thread's running execution context is the fiber's.
require_relative 'oracle'

def in_fiber
  Oracle.park(ready: true)
end

Fiber.new { [1].each { in_fiber } }.resume
