// Must NOT compile: a token literal of three characters. The error must say what a token is.
#include <courier/token.hpp>

int main() {
  constexpr courier::token add{"ADD"};
  return add.is_null() ? 1 : 0;
}
