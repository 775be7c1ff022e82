# A 300-deep recursion.
require_relative 'oracle'

def rec(n)
  n.zero? ? Oracle.park(ready: true) : rec(n - 1)
end

rec(300)
