# Sourced by test-rubies.sh and mirror-rubies.sh: what YJIT needs and whether a Ruby has it.
#
#   rustc_path        the machine's rustc (on PATH, else ~/.cargo/bin), or nothing
#   yjit_of RUBY..    1 when that Ruby (a command and its first words) runs with YJIT on, else 0
rustc_path() {
  command -v rustc || { [ -x "$HOME/.cargo/bin/rustc" ] && echo "$HOME/.cargo/bin/rustc"; } || true
}

yjit_of() {
  [ "$("$@" --yjit -e 'print(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?)' 2>/dev/null)" = true ] && echo 1 || echo 0
}
