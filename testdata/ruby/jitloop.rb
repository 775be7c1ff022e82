# Spins two named methods deep in an integer loop that YJIT compiles whole.
# The loop's method reads no constant: YJIT 3.1 leaves for the interpreter
# at a constant it has not seen yet, and so does `nil while true`.
module JitLoop
  def self.outer
    STDOUT.puts 'ready'
    STDOUT.flush
    inner
  end

  def self.inner
    i = 0
    while true
      i += 1
    end
  end
end

JitLoop.outer
