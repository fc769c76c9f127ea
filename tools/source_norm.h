/* tools/source_norm.h - the normalised form of a kernel source, which its cache-key hash covers
 * (docs/architecture.md, "Cache key"). Header-only: tools/embed.c and tests/test_embed.c use it.
 *
 * The form is what the compiler sees, less the layout: comments become one space (as in
 * translation phase 3), backslash-newline splices are removed (phase 2; not inside raw strings),
 * string and character literals stay byte for byte, each line is trimmed, whitespace runs outside
 * literals become one space (never none: `#define F(x)` and `#define F (x)` stay different),
 * empty lines are dropped and the lines are joined with '\n' (no final newline). CRLF and a lone
 * CR end a line like LF; a backslash that ends a line without splicing it (`\ ` before the
 * break) keeps one space after it. The form is itself a source that lexes to the same tokens,
 * so two sources with the same form compile alike except for line numbers (normalising is
 * idempotent); tests/test_embed.c checks that no kernel source lets line numbers reach the
 * binary. Where this lexer is stricter than the compiler (a lone CR, `\ ` before a break), forms
 * differ where the compiler sees no difference: a spurious miss, never a wrong hit. */
#ifndef SK_SOURCE_NORM_H
#define SK_SOURCE_NORM_H
#include <stdlib.h>
#include <string.h>

typedef enum {
  SK_LEX_CODE,    /* one character of a token outside literals */
  SK_LEX_LITERAL, /* one character of a string or character literal, quotes and escapes included */
  SK_LEX_SPACE,   /* one whitespace character, or a whole comment */
  SK_LEX_NEWLINE  /* the end of a logical line */
} sk_lex_kind;

/* Called per event with the character (0 for SPACE/NEWLINE) and the 1-based physical line it
 * starts on. */
typedef void (*sk_lex_fn)(void *ctx, sk_lex_kind kind, char c, int line);

/* Length of the line break at s[i] (LF, CRLF or a lone CR), 0 if none. */
static inline size_t sk_lex_newline_at(const char *s, size_t n, size_t i) {
  if (i >= n) return 0;
  if (s[i] == '\n') return 1;
  if (s[i] == '\r') return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
  return 0;
}

/* The first logical character at or after i: skips backslash-newline splices, counting lines. */
static inline size_t sk_lex_skip_splices(const char *s, size_t n, size_t i, int *line) {
  while (i < n && s[i] == '\\') {
    size_t nl = sk_lex_newline_at(s, n, i + 1);
    if (!nl) break;
    i += 1 + nl;
    ++*line;
  }
  return i;
}

static inline int sk_lex_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (unsigned char)c >= 0x80;
}

/* Lex s[0..n) into events for fn. Unterminated literals end at the end of their line and an
 * unterminated block comment at the end of the text, so any input lexes. */
static inline void sk_lex(const char *s, size_t n, sk_lex_fn fn, void *ctx) {
  enum { TOK_NONE, TOK_IDENT, TOK_NUMBER } tok = TOK_NONE;
  char ident[4]; /* the first characters of the current identifier: a raw-string prefix? */
  size_t ident_len = 0;
  char prev_code = 0; /* the previous character of a pp-number */
  int line = 1;
  size_t i = sk_lex_skip_splices(s, n, 0, &line);
  while (i < n) {
    char c = s[i];
    size_t nl = sk_lex_newline_at(s, n, i);
    if (nl) {
      fn(ctx, SK_LEX_NEWLINE, 0, line);
      line++;
      i = sk_lex_skip_splices(s, n, i + nl, &line);
      tok = TOK_NONE;
      continue;
    }
    int at = line, next_line = line;
    size_t j = sk_lex_skip_splices(s, n, i + 1, &next_line);
    char d = j < n ? s[j] : 0;
    if (c == '/' && d == '/') { /* to the end of the logical line; a splice continues it */
      line = next_line;
      i = sk_lex_skip_splices(s, n, j + 1, &line);
      while (i < n && !sk_lex_newline_at(s, n, i)) i = sk_lex_skip_splices(s, n, i + 1, &line);
      fn(ctx, SK_LEX_SPACE, 0, at);
      tok = TOK_NONE;
      continue;
    }
    if (c == '/' && d == '*') {
      line = next_line;
      i = sk_lex_skip_splices(s, n, j + 1, &line);
      char prev = 0;
      while (i < n) {
        char e = s[i];
        size_t enl = sk_lex_newline_at(s, n, i);
        if (enl) {
          line++;
          i = sk_lex_skip_splices(s, n, i + enl, &line);
          prev = 0;
          continue;
        }
        i = sk_lex_skip_splices(s, n, i + 1, &line);
        if (prev == '*' && e == '/') break;
        prev = e;
      }
      fn(ctx, SK_LEX_SPACE, 0, at);
      tok = TOK_NONE;
      continue;
    }
    if (c == '\'' && tok == TOK_NUMBER && sk_lex_ident_char(d)) { /* digit separator: 1'000 */
      fn(ctx, SK_LEX_CODE, c, at);
      line = next_line;
      i = j;
      continue;
    }
    if (c == '"' && tok == TOK_IDENT && ident_len <= 3 && ident_len >= 1 && ident[ident_len - 1] == 'R' &&
        (ident_len == 1 || (ident_len == 2 && (ident[0] == 'L' || ident[0] == 'u' || ident[0] == 'U')) ||
         (ident_len == 3 && ident[0] == 'u' && ident[1] == '8'))) {
      /* Raw string R"delim(...)delim": physical characters, no splices, to the closing
       * delimiter. A malformed delimiter falls through to an ordinary literal. */
      size_t k = i + 1, dlen = 0;
      while (k < n && dlen <= 16 && s[k] != '(' && s[k] != ')' && s[k] != '\\' && s[k] != ' ' &&
             s[k] != '\t' && s[k] != '"' && !sk_lex_newline_at(s, n, k))
        k++, dlen++;
      if (k < n && s[k] == '(' && dlen <= 16) {
        const char *delim = s + i + 1;
        size_t end = k + 1;
        while (end < n && !(s[end] == ')' && end + 1 + dlen < n && !memcmp(s + end + 1, delim, dlen) &&
                            s[end + 1 + dlen] == '"'))
          end++;
        end = end < n ? end + dlen + 2 : n;
        for (size_t p = i; p < end; p++) {
          size_t pnl = sk_lex_newline_at(s, n, p);
          if (pnl) { /* a line break inside the literal is the character '\n' */
            fn(ctx, SK_LEX_LITERAL, '\n', line++);
            p += pnl - 1;
          } else {
            fn(ctx, SK_LEX_LITERAL, s[p], line);
          }
        }
        i = sk_lex_skip_splices(s, n, end, &line);
        tok = TOK_NONE;
        continue;
      }
    }
    if (c == '"' || c == '\'') { /* ordinary literal, escapes kept; ends at its quote or line */
      fn(ctx, SK_LEX_LITERAL, c, at);
      line = next_line;
      i = j;
      while (i < n && !sk_lex_newline_at(s, n, i)) {
        char e = s[i];
        fn(ctx, SK_LEX_LITERAL, e, line);
        i = sk_lex_skip_splices(s, n, i + 1, &line);
        if (e == c) break;
        if (e == '\\' && i < n && !sk_lex_newline_at(s, n, i)) {
          fn(ctx, SK_LEX_LITERAL, s[i], line);
          i = sk_lex_skip_splices(s, n, i + 1, &line);
        }
      }
      tok = TOK_NONE;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\v' || c == '\f') {
      fn(ctx, SK_LEX_SPACE, 0, at);
      tok = TOK_NONE;
    } else {
      fn(ctx, SK_LEX_CODE, c, at);
      /* pp-numbers (for digit separators) and identifiers (for raw-string prefixes) */
      if (tok == TOK_NUMBER && (sk_lex_ident_char(c) || c == '.')) {
      } else if (tok == TOK_NUMBER && (c == '+' || c == '-') &&
                 (prev_code == 'e' || prev_code == 'E' || prev_code == 'p' || prev_code == 'P')) {
      } else if (tok == TOK_IDENT && sk_lex_ident_char(c)) {
        if (ident_len < sizeof ident) ident[ident_len] = c;
        ident_len++;
      } else if ((c >= '0' && c <= '9') || (c == '.' && d >= '0' && d <= '9')) {
        tok = TOK_NUMBER;
      } else if (sk_lex_ident_char(c)) {
        tok = TOK_IDENT;
        ident[0] = c;
        ident_len = 1;
      } else {
        tok = TOK_NONE;
      }
      prev_code = c;
    }
    line = next_line;
    i = j;
  }
}

typedef struct {
  char *buf;
  size_t len, cap;
  int line_has_content, pending_space, last_backslash, failed;
} sk_norm_state;

static inline void sk_norm_put(sk_norm_state *st, char c) {
  if (st->failed) return;
  if (st->len + 2 > st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 4096;
    char *b = (char *)realloc(st->buf, cap);
    if (!b) { st->failed = 1; return; }
    st->buf = b;
    st->cap = cap;
  }
  st->buf[st->len++] = c;
}

static inline void sk_norm_event(void *ctx, sk_lex_kind kind, char c, int line) {
  sk_norm_state *st = (sk_norm_state *)ctx;
  (void)line;
  switch (kind) {
  case SK_LEX_SPACE:
    if (st->line_has_content) st->pending_space = 1;
    break;
  case SK_LEX_NEWLINE:
    /* Trailing whitespace and empty lines vanish; a line that ends in a backslash (one that
     * is no splice: `\ ` at the end of a line, an unterminated literal) keeps a space after
     * it, so that it does not become one. */
    if (st->line_has_content && st->last_backslash) sk_norm_put(st, ' ');
    st->line_has_content = 0;
    st->pending_space = 0;
    break;
  case SK_LEX_CODE:
  case SK_LEX_LITERAL:
    if (!st->line_has_content) {
      if (st->len) sk_norm_put(st, '\n');
      st->line_has_content = 1;
    } else if (st->pending_space) {
      sk_norm_put(st, ' ');
    }
    st->pending_space = 0;
    st->last_backslash = c == '\\';
    sk_norm_put(st, c);
    break;
  }
}

/* The normalised form of s[0..n): malloc'd, NUL-terminated, its length in *out_len (may be
 * NULL). NULL when out of memory. */
static inline char *sk_source_normalize(const char *s, size_t n, size_t *out_len) {
  sk_norm_state st = {0};
  sk_lex(s, n, sk_norm_event, &st);
  sk_norm_event(&st, SK_LEX_NEWLINE, 0, 0); /* the end of the text ends its last line */
  sk_norm_put(&st, 0);
  if (st.failed) { free(st.buf); return NULL; }
  if (out_len) *out_len = st.len - 1;
  return st.buf;
}
#endif
