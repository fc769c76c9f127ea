/* The embedder's normalised source hashes (tools/source_norm.h): the normaliser on tricky
 * inputs, the kernel sources' freedom from layout-dependent constructs (the key does not cover
 * line numbers), and the closure hashes of a copy of ops/ under comment and code edits. */
#include <criterion/criterion.h>
#include <errno.h>
#include <xxhash.h>

#include "../tools/source_norm.h"
#include "embedded.h"
#include "testutil.h"

/* ---- the normaliser ------------------------------------------------------------------------ */

static char *norm(const char *s) {
  char *r = sk_source_normalize(s, strlen(s), NULL);
  cr_assert_not_null(r);
  return r;
}

static void expect_norm(const char *in, const char *want) {
  char *got = norm(in);
  cr_expect_str_eq(got, want, "normalising [%s]:\n got [%s]\nwant [%s]", in, got, want);
  free(got);
}

Test(norm, comment_markers_inside_literals_stay) {
  expect_norm("const char *s = \"a // b /* c */\";  // tail\n", "const char *s = \"a // b /* c */\";");
  expect_norm("char c = '/'; char d = '\"'; int e = 1; // x \"y\n", "char c = '/'; char d = '\"'; int e = 1;");
  expect_norm("char q = '\\''; /* c */ int x; // '\n", "char q = '\\''; int x;");
  expect_norm("s = \"a\\\"//b\"; // c\n", "s = \"a\\\"//b\";");
  expect_norm("s = u8\"/*\"; t = L'/'; /* \" */ u = 1;", "s = u8\"/*\"; t = L'/'; u = 1;");
}

Test(norm, block_comments_spanning_lines_become_one_space) {
  expect_norm("int a; /* line1\nline2 */ int b;\nint c;\n", "int a; int b;\nint c;");
  /* the preprocessor sees one line: the macro's body is `1 2` */
  expect_norm("#define X 1 /*\n*/ 2\nint y;\n", "#define X 1 2\nint y;");
  expect_norm("a /*/ not closed */b", "a b");
  expect_norm("a /** x **/ b /* unterminated", "a b");
}

Test(norm, line_comment_continued_by_a_splice_swallows_the_next_line) {
  expect_norm("int a; // comment \\\nint b;\nint c;\n", "int a;\nint c;");
  expect_norm("int a; // comment \\\r\nint b;\r\nint c;\r\n", "int a;\nint c;");
  /* a backslash before trailing spaces is no splice */
  expect_norm("int a; // comment \\ \nint b;\n", "int a;\nint b;");
}

Test(norm, splices_join_lines_outside_comments) {
  expect_norm("in\\\nt a;\n", "int a;");
  expect_norm("#define F(x) \\\n  ((x) + 1)\nint y;\n", "#define F(x) ((x) + 1)\nint y;");
  expect_norm("/\\\n/ comment\nint a;", "int a;");
  expect_norm("s = \"ab\\\ncd\";", "s = \"abcd\";");
  /* a backslash before whitespace is no splice, and its line must not end in one */
  expect_norm("#define X a \\ \t\nint b;", "#define X a \\ \nint b;");
}

Test(norm, comments_separate_tokens) {
  expect_norm("a/**/b", "a b");
  expect_norm("a//x\nb", "a\nb");
  char *x = norm("int/**/x;"), *y = norm("intx;");
  cr_expect_str_neq(x, y);
  free(x);
  free(y);
}

Test(norm, whitespace_inside_literals_is_kept_outside_collapsed) {
  expect_norm("  s = \"a   b\t c\";   x  =\t 1 ;  \n", "s = \"a   b\t c\"; x = 1 ;");
  expect_norm("c = ' ';\td = '\t';", "c = ' '; d = '\t';");
  /* collapsed, never removed */
  char *a = norm("#define F(x) x\n"), *b = norm("#define F (x) x\n");
  cr_expect_str_neq(a, b);
  free(a);
  free(b);
  char *p = norm("a+b"), *q = norm("a + b");
  cr_expect_str_neq(p, q);
  free(p);
  free(q);
}

Test(norm, empty_lines_and_indentation_vanish) {
  expect_norm("\n\n   a  \n\t\n \f b\n\n", "a\nb");
  expect_norm("", "");
  expect_norm("  // only a comment\n/* and another */\n", "");
}

Test(norm, crlf_and_lone_cr_end_lines_like_lf) {
  expect_norm("int a;\r\n\r\n  int  b; // c\r\n", "int a;\nint b;");
  expect_norm("int a;\rint b;", "int a;\nint b;");
}

Test(norm, raw_strings_are_verbatim) {
  expect_norm("s = R\"x(a // b\n  /* c */ )\" )x\"; // d\n", "s = R\"x(a // b\n  /* c */ )\" )x\";");
  expect_norm("s = u8R\"(\\\n)\";", "s = u8R\"(\\\n)\";");
  /* not a raw-string prefix: an ordinary literal follows an identifier */
  expect_norm("FOOR\"a  b\"  // c", "FOOR\"a  b\"");
}

Test(norm, digit_separators_are_not_char_literals) {
  expect_norm("int n = 1'000'000; // it's\n", "int n = 1'000'000;");
  expect_norm("x = 0x1'ffu + 1.5e+3'0; // '\n", "x = 0x1'ffu + 1.5e+3'0;");
}

Test(norm, kernel_sources_normalise_idempotently_to_their_embedded_hashes) {
  for (size_t i = 0; i < sk_embedded_source_count; i++) {
    const sk_embedded_source *s = &sk_embedded_sources[i];
    size_t n1, n2;
    char *once = sk_source_normalize(s->text, s->length, &n1);
    cr_assert_not_null(once);
    char *twice = sk_source_normalize(once, n1, &n2);
    cr_assert_not_null(twice);
    cr_expect(n1 == n2 && !memcmp(once, twice, n1), "%s: the normalised form is not a fixed point", s->path);
    cr_expect_eq(XXH3_64bits(once, n1), s->hash, "%s: the embedded hash is not of the normalised text", s->path);
    cr_expect_lt(n1, s->length, "%s: normalising removed nothing", s->path);
    free(once);
    free(twice);
  }
}

/* ---- layout dependence --------------------------------------------------------------------- */

/* Identifiers whose expansion depends on where code sits (line, file) or on the build time:
 * none of it is in the key, which covers the normalised text only. */
static const char *const layout_idents[] = {
    "__LINE__", "__FILE__", "__FILE_NAME__", "__BASE_FILE__", "__builtin_LINE", "__builtin_FILE",
    "__builtin_COLUMN", "source_location", "assert", "__DATE__", "__TIME__", "__TIMESTAMP__",
};

typedef struct {
  const char *path;
  char id[64];
  size_t idlen;
  int id_line;
  int line_start, directive;
  char msgs[8192];
  size_t mlen;
  int hits;
} layout_scan;

static void layout_report(layout_scan *sc, int line, const char *what) {
  sc->hits++;
  if (sc->mlen < sizeof sc->msgs)
    sc->mlen += (size_t)snprintf(sc->msgs + sc->mlen, sizeof sc->msgs - sc->mlen,
                                 "%s:%d: %s makes the binary depend on the layout or the build, "
                                 "which the cache key does not cover\n",
                                 sc->path, line, what);
}

static void layout_flush(layout_scan *sc) {
  if (!sc->idlen) return;
  sc->id[sc->idlen < sizeof sc->id ? sc->idlen : sizeof sc->id - 1] = 0;
  for (size_t k = 0; k < sizeof layout_idents / sizeof layout_idents[0]; k++)
    if (!strcmp(sc->id, layout_idents[k])) layout_report(sc, sc->id_line, sc->id);
  if (sc->directive && !strcmp(sc->id, "line")) layout_report(sc, sc->id_line, "#line");
  sc->directive = 0;
  sc->idlen = 0;
}

static void layout_event(void *ctx, sk_lex_kind kind, char c, int line) {
  layout_scan *sc = (layout_scan *)ctx;
  if (kind == SK_LEX_CODE && sk_lex_ident_char(c)) {
    if (!sc->idlen) sc->id_line = line;
    if (sc->idlen + 1 < sizeof sc->id) sc->id[sc->idlen] = c;
    sc->idlen++;
    sc->line_start = 0;
    return;
  }
  layout_flush(sc);
  if (kind == SK_LEX_NEWLINE) {
    sc->line_start = 1;
    sc->directive = 0;
  } else if (kind == SK_LEX_CODE) {
    sc->directive = sc->line_start && c == '#';
    sc->line_start = 0;
  } else if (kind == SK_LEX_LITERAL) {
    sc->line_start = sc->directive = 0;
  }
}

static void layout_check(layout_scan *sc, const char *path, const char *text, size_t n) {
  sc->path = path;
  sc->idlen = 0;
  sc->line_start = 1;
  sc->directive = 0;
  sk_lex(text, n, layout_event, sc);
  layout_flush(sc);
}

Test(embed, the_layout_check_finds_what_it_should) {
  const char *bad =
      "int a = __LINE__;\n"
      "/* a comment\n spanning */ const char *f = __FILE__;\n"
      "  #  line 40\n"
      "void g() { assert(a); }\n";
  layout_scan *sc = calloc(1, sizeof *sc);
  layout_check(sc, "bad.cuh", bad, strlen(bad));
  cr_expect_eq(sc->hits, 4, "%s", sc->msgs);
  cr_expect(strstr(sc->msgs, "bad.cuh:1: __LINE__"), "%s", sc->msgs);
  cr_expect(strstr(sc->msgs, "bad.cuh:3: __FILE__"), "%s", sc->msgs);
  cr_expect(strstr(sc->msgs, "bad.cuh:4: #line"), "%s", sc->msgs);
  cr_expect(strstr(sc->msgs, "bad.cuh:5: assert"), "%s", sc->msgs);
  const char *good =
      "static_assert(N > 0, \"__LINE__ assert(\");\n"
      "// __FILE__ assert(x)\n"
      "/* #line 3 */ int line = 2; // line\n"
      "#define LINE_OF(x) x.line\n"
      "char c = '#'; int my_assert(int);\n";
  memset(sc, 0, sizeof *sc);
  layout_check(sc, "good.cuh", good, strlen(good));
  cr_expect_eq(sc->hits, 0, "%s", sc->msgs);
  free(sc);
}

Test(embed, kernel_sources_do_not_depend_on_layout) {
  layout_scan *sc = calloc(1, sizeof *sc);
  cr_assert_gt(sk_embedded_source_count, 10u);
  for (size_t i = 0; i < sk_embedded_source_count; i++)
    layout_check(sc, sk_embedded_sources[i].path, sk_embedded_sources[i].text, sk_embedded_sources[i].length);
  cr_assert_eq(sc->hits, 0, "%s", sc->msgs);
  free(sc);
}

/* ---- closure hashes of an edited copy of ops/ ---------------------------------------- */

static void write_source(const char *root, const char *rel, const char *text, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    cr_assert(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s", path);
    *p = '/';
  }
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fwrite(text, 1, n, f), n);
  fclose(f);
}

/* Run sk-embed over the copy in `root`; the closure hash of every source, in embedded order. */
static uint64_t *embed_closure_hashes(const char *root, const char *tag) {
  size_t n = sk_embedded_source_count;
  char embed[512], out[512];
  snprintf(embed, sizeof embed, "%s/bin/sk-embed", tu_build_dir());
  snprintf(out, sizeof out, "%s/%s.c", root, tag);
  char **argv = calloc(n + 4, sizeof *argv);
  argv[0] = embed;
  argv[1] = (char *)root;
  argv[2] = out;
  for (size_t i = 0; i < n; i++) argv[3 + i] = (char *)sk_embedded_sources[i].path;
  cr_assert_eq(tu_run(argv, NULL, NULL), 0, "%s failed", embed);
  free(argv);
  uint64_t *h = calloc(n, sizeof *h);
  unsigned char *seen = calloc(n, 1);
  FILE *f = fopen(out, "r");
  cr_assert_not_null(f, "%s", out);
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    unsigned idx;
    unsigned long long v;
    if (sscanf(line, "#define SK_CLOSURE_HASH_%u 0x%llx", &idx, &v) == 2 && idx < n) {
      h[idx] = v;
      seen[idx] = 1;
    }
  }
  fclose(f);
  for (size_t i = 0; i < n; i++) cr_assert(seen[i], "%s: no closure hash for source %zu", out, i);
  free(seen);
  return h;
}

Test(embed, comment_edits_keep_closure_hashes_code_edits_change_exactly_the_includers) {
  size_t n = sk_embedded_source_count;
  const sk_embedded_source *defs = sk_find_embedded_source("common/defs.cuh");
  cr_assert_not_null(defs);
  size_t defs_idx = (size_t)(defs - sk_embedded_sources);
  char *root = tu_tempdir("embed-e2e");
  cr_assert_not_null(root);
  for (size_t i = 0; i < n; i++)
    write_source(root, sk_embedded_sources[i].path, sk_embedded_sources[i].text, sk_embedded_sources[i].length);

  /* The unedited copy reproduces the build's hashes (same embedder, same sorted order). */
  uint64_t *base = embed_closure_hashes(root, "base");
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(base[i], sk_embedded_sources[i].closure_hash, "%s", sk_embedded_sources[i].path);

  /* Comment and layout edit: a new block comment, an edited line comment, every line
   * indented, blank lines after lines that do not continue. */
  const char *t = defs->text;
  size_t tn = defs->length, cap = 5 * tn + 4096, len = 0;
  char *edit = malloc(cap);
  len += (size_t)snprintf(edit, cap, "/* a comment-only edit:\n * it spans lines and says // \"q\" 'c' */\n\n");
  int commented = 0;
  for (size_t p = 0; p < tn;) {
    const char *nl = memchr(t + p, '\n', tn - p);
    size_t e = nl ? (size_t)(nl - t) : tn;
    const char *q = t + p;
    while (q < t + e && (*q == ' ' || *q == '\t')) q++;
    edit[len++] = ' ';
    edit[len++] = ' ';
    memcpy(edit + len, t + p, e - p);
    len += e - p;
    int continues = e > p && t[e - 1] == '\\';
    if (!commented && q + 2 < t + e && q[0] == '/' && q[1] == '/' && !continues) {
      len += (size_t)snprintf(edit + len, cap - len, " (edited)");
      commented = 1;
    }
    if (nl) edit[len++] = '\n';
    if (nl && !continues) edit[len++] = '\n';
    p = e + 1;
  }
  len += (size_t)snprintf(edit + len, cap - len, "\n// the end\n");
  cr_assert(commented, "common/defs.cuh has no line comment to edit");
  write_source(root, "common/defs.cuh", edit, len);
  uint64_t *comment = embed_closure_hashes(root, "comment");
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(comment[i], base[i], "a comment-only edit of common/defs.cuh changed the closure hash of %s",
                 sk_embedded_sources[i].path);

  /* Code edit: exactly the sources whose closure holds defs.cuh change. */
  len += (size_t)snprintf(edit + len, cap - len, "constexpr int sk_probe_ = 1;\n");
  write_source(root, "common/defs.cuh", edit, len);
  uint64_t *code = embed_closure_hashes(root, "code");
  size_t includers = 0;
  for (size_t i = 0; i < n; i++) {
    const sk_embedded_source *s = &sk_embedded_sources[i];
    int includes = 0;
    for (size_t c = 0; c < s->closure_count; c++) includes |= (size_t)s->closure[c] == defs_idx;
    includers += (size_t)includes;
    if (includes)
      cr_expect_neq(code[i], base[i], "a code edit of common/defs.cuh kept the closure hash of %s", s->path);
    else
      cr_expect_eq(code[i], base[i], "a code edit of common/defs.cuh changed the closure hash of %s", s->path);
  }
  cr_expect(includers > 1 && includers < n, "%zu of %zu sources include common/defs.cuh", includers, n);
  free(edit);
  free(base);
  free(comment);
  free(code);
  tu_rmrf(root);
  free(root);
}
