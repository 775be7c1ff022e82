# A deep, block-heavy, GC-heavy application's shape, for comparing rubyperf's
# shares with stackprof's in the same process (bench/shares.go): a recursive
# descent parser (stacks 50-80 frames deep), ERB templates compiled once and
# rendered again and again, short-lived code (a template rendered from source
# now and then), C extensions (JSON, Digest, Zlib), and files required while
# it runs. ARGV: seconds of CPU to run, the file to write stackprof's report
# to (JSON), and stackprof's interval in microseconds.
require 'erb'
require 'json'
require 'digest'
require 'zlib'
require 'stackprof'

seconds = Float(ARGV.fetch(0, '10'))
report = ARGV.fetch(1, 'stackprof.json')
interval = Integer(ARGV.fetch(2, '1000'))

# Arithmetic with nested parentheses, parsed by recursive descent.
class Lexer
  def initialize(src) = (@src = src; @pos = 0)

  def tokens
    out = []
    while @pos < @src.size
      c = @src[@pos]
      if c =~ /\d/
        start = @pos
        @pos += 1 while @pos < @src.size && @src[@pos] =~ /\d/
        out << [:num, @src[start...@pos].to_i]
      else
        out << [:op, c] unless c == ' '
        @pos += 1
      end
    end
    out
  end
end

class Parser
  def initialize(tokens) = (@tokens = tokens; @i = 0)
  def parse = expr
  def peek = @tokens[@i]
  def take = (@i += 1; @tokens[@i - 1])

  def expr
    left = term
    while (t = peek) && %w[+ -].include?(t[1])
      take
      right = term
      left = [t[1].to_sym, left, right]
    end
    left
  end

  def term
    left = factor
    while (t = peek) && %w[* /].include?(t[1])
      take
      left = [t[1].to_sym, left, factor]
    end
    left
  end

  def factor
    t = take
    return t[1] if t[0] == :num
    inner = expr
    take # ')'
    [:paren, inner]
  end
end

module Eval
  def self.value(node)
    case node
    in Integer then node
    in [:paren, inner] then value(inner)
    in [op, l, r] then [value(l), value(r)].then { |a, b| op == :/ ? (b.zero? ? a : a / b) : a.send(op, b) }
    end
  end
end

def nested(depth, rng)
  return rng.rand(1..99).to_s if depth.zero?
  "(#{nested(depth - 1, rng)} #{%w[+ - * /].sample(random: rng)} #{rng.rand(1..9)})"
end

class Report
  TEMPLATE = <<~ERB
    <h1><%= title %></h1>
    <% rows.each do |r| %><tr><td><%= r[:name] %></td><td><%= r[:value] %></td></tr>
    <% end %>
  ERB
  erb = ERB.new(TEMPLATE)
  erb.def_method(self, 'render(title, rows)', '(report)')

  def digest(html) = Digest::SHA256.hexdigest(Zlib.deflate(html))
end

def work(rng, round)
  src = nested(25, rng)
  ast = Parser.new(Lexer.new(src).tokens).parse
  v = Eval.value(ast)
  rows = Array.new(30) { |i| { name: "row#{i}", value: v + i } }
  html = Report.new.render("round #{round}", rows)
  json = JSON.generate(rows)
  JSON.parse(json).sum { |r| r['value'] }
  Report.new.digest(html)
  # Now and then a template from source: code that lives for one call.
  ERB.new("<%= #{round} * 2 %> <%= rows.size %>").result(binding) if round % 50 == 0
  # What was required later gets used once it is there.
  CSV.generate_line(rows.first.values) if defined?(CSV)
  Set.new(rows.map { |r| r[:value] % 7 }).size if defined?(Set)
  Time.now.iso8601 if Time.method_defined?(:iso8601)
end

# Files required while it runs, as an application loads code lazily.
LATER = %w[set time csv securerandom]
cpu = -> { Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) }
start = cpu.call
rng = Random.new(1)
result = StackProf.run(mode: :cpu, interval: interval) do
  round = 0
  while cpu.call - start < seconds
    require LATER[round / 20] if round % 20 == 0 && round / 20 < LATER.size
    work(rng, round)
    round += 1
  end
end
frames = result[:frames].values.map { |f| { name: f[:name], self: f[:samples], total: f[:total_samples] } }
File.write(report, JSON.generate(samples: result[:samples], gc_samples: result[:gc_samples], frames: frames))
