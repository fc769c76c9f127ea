/*
 * cache/check.c - the structure check of an LMDB data file.
 *
 * LMDB does not checksum its pages and trusts what it reads: a damaged page header, node offset
 * or size makes its own code (a lookup, a cursor step, the copy of a page a write is about to
 * change) read or write outside the page and fault. So before the store uses a file it checks
 * the two meta pages (sk_lmdb_check_meta, before mdb_env_open), then walks every B-tree of one
 * snapshot itself (sk_lmdb_check), reading pages with pread (nothing read is trusted, nothing can
 * fault), and checks what LMDB's code relies on. Any failure means the file is damaged, and LMDB
 * is never asked to walk it.
 *
 * The layout is LMDB 0.9's data format (mdb.c, MDB_DATA_VERSION 1), native little-endian:
 *   page   pgno u64 | pad u16 | flags u16 | lower u16 | upper u16 (overflow: page count u32) |
 *          node offsets u16[(lower - 16) / 2], nodes packed between upper and the page end
 *   node   lo u16 | hi u16 | flags u16 | ksize u16 | key | data
 *          leaf: data size lo | hi << 16, the data inline or (F_BIGDATA) an overflow page number
 *          branch: the child page number lo | hi << 16 | flags << 32
 *   meta   (pages 0 and 1, after the page header) magic u32 | version u32 | address u64 |
 *          map size u64 | free-list and main MDB_db | last page u64 | txn id u64
 *   MDB_db pad u32 | flags u16 | depth u16 | branch, leaf, overflow pages u64 | entries u64 |
 *          root u64
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "cache_internal.h"

#define PAGE_HDR 16u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define NODE_HDR 8u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define DB_SIZE 48u
#define DB_FLAGS 4u
#define DB_ROOT 40u
#define META_MAGIC 0xBEEFC0DEu
#define META_DBS (PAGE_HDR + 24u)
#define META_LAST_PG (PAGE_HDR + 120u)
#define META_TXNID (PAGE_HDR + 128u)
#define MDB_INTEGERKEY_FLAG 0x08u
#define P_INVALID UINT64_MAX
#define MAX_DEPTH 32    /* LMDB's cursor stack */
#define MAX_KEY 511u    /* LMDB's default largest key */
#define MAX_NAMED_DBS 8

typedef struct walker {
  int fd;
  size_t psize;
  uint64_t last_pgno;   /* of the snapshot: pages 0..last_pgno exist */
  uint8_t *seen;        /* one bit per page: reached from a root (a tree, or an overflow run) */
  char *why;
  size_t why_size;
} walker;

static int damaged(walker *w, const char *fmt, ...) SK_PRINTF(2, 3);
static int damaged(walker *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->why, w->why_size, fmt, ap);
  va_end(ap);
  return 1;
}

static int read_at(walker *w, uint64_t pgno, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(w->fd, (uint8_t *)buf + got, n - got, (off_t)(pgno * w->psize + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return damaged(w, "page %llu lies past the end of the file", (unsigned long long)pgno);
    got += (size_t)r;
  }
  return 0;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Mark pgno .. pgno + count - 1 as used; each page may be used once. */
static int use_pages(walker *w, uint64_t pgno, uint64_t count, const char *what) {
  if (pgno < 2 || count == 0 || pgno > w->last_pgno || count - 1 > w->last_pgno - pgno)
    return damaged(w, "%s: page %llu (+%llu) outside pages 2..%llu", what, (unsigned long long)pgno,
                   (unsigned long long)count, (unsigned long long)w->last_pgno);
  for (uint64_t p = pgno; p < pgno + count; p++) {
    if (w->seen[p / 8] & (1u << (p % 8)))
      return damaged(w, "%s: page %llu is reached twice", what, (unsigned long long)p);
    w->seen[p / 8] |= (uint8_t)(1u << (p % 8));
  }
  return 0;
}

typedef struct named_db {
  char name[16];
  uint64_t root;
  unsigned flags;
} named_db;

typedef struct tree {
  const char *name;
  int integer_keys;     /* the free list: 8-byte native integer keys */
  int is_free_list;
  int is_main;          /* its leaves hold the named databases */
  int leaf_depth;       /* every leaf of a B-tree is at the same depth; -1 until the first */
  named_db *dbs;        /* is_main: collected here */
  int ndbs;
  uint64_t *free_pages; /* is_free_list: the pages it lists (checked against the trees later) */
  size_t nfree, capfree;
} tree;

static int key_less(const tree *t, const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  if (t->integer_keys) return sk_le64_load(a) < sk_le64_load(b);
  size_t n = an < bn ? an : bn;
  int c = memcmp(a, b, n);
  return c < 0 || (c == 0 && an < bn);
}

typedef struct extent {
  unsigned start, end;
} extent;

static int by_start(const void *a, const void *b) {
  const extent *x = a, *y = b;
  return (x->start > y->start) - (x->start < y->start);
}

/* A free-list record: a count, then that many page numbers (the record may have room for more). */
static int check_free_record(walker *w, tree *t, const uint8_t *v, size_t size) {
  if (size < 8 || size % 8) return damaged(w, "free list: a record of %zu bytes", size);
  const uint64_t n = sk_le64_load(v);
  if (n > size / 8 - 1) return damaged(w, "free list: a record of %zu bytes claims %llu pages", size, (unsigned long long)n);
  for (uint64_t i = 1; i <= n; i++) {
    const uint64_t pg = sk_le64_load(v + 8 * i);
    if (pg < 2 || pg > w->last_pgno)
      return damaged(w, "free list: page %llu outside pages 2..%llu", (unsigned long long)pg, (unsigned long long)w->last_pgno);
    if (t->nfree == t->capfree) {
      size_t cap = t->capfree ? t->capfree * 2 : 256;
      uint64_t *nv = realloc(t->free_pages, cap * sizeof *nv);
      if (!nv) return damaged(w, "out of memory");
      t->free_pages = nv;
      t->capfree = cap;
    }
    t->free_pages[t->nfree++] = pg;
  }
  return 0;
}

static int walk_page(walker *w, tree *t, uint64_t pgno, int depth);

/* One leaf node at `node` (its extent already checked to hold the header). */
static int check_leaf_node(walker *w, tree *t, const uint8_t *page, unsigned off, extent *ext) {
  const uint8_t *node = page + off;
  const unsigned flags = le16(node + 4), ksize = le16(node + 6);
  const uint64_t dsize = (uint64_t)le16(node) | (uint64_t)le16(node + 2) << 16;
  if (flags & ~(F_BIGDATA | F_SUBDATA) || (flags & F_SUBDATA && (!t->is_main || flags & F_BIGDATA)))
    return damaged(w, "%s: leaf node flags 0x%x", t->name, flags);
  if (ksize == 0 || ksize > MAX_KEY || (t->integer_keys && ksize != 8))
    return damaged(w, "%s: a key of %u bytes", t->name, ksize);
  const uint64_t body = NODE_HDR + ksize + (flags & F_BIGDATA ? 8 : dsize);
  if (body > w->psize - off) return damaged(w, "%s: a node runs past its page", t->name);
  ext->end = off + (unsigned)((body + 1) & ~1ull);
  const uint8_t *data = node + NODE_HDR + ksize;
  if (flags & F_BIGDATA) {
    const uint64_t opg = sk_le64_load(data);
    uint8_t hdr[PAGE_HDR];
    if (opg < 2 || opg > w->last_pgno || read_at(w, opg, hdr, sizeof hdr))
      return w->why[0] ? 1 : damaged(w, "%s: overflow page %llu outside the file", t->name, (unsigned long long)opg);
    const uint64_t pages = sk_le32_load(hdr + 12);
    if (sk_le64_load(hdr) != opg || le16(hdr + 10) != P_OVERFLOW)
      return damaged(w, "%s: page %llu is not an overflow page", t->name, (unsigned long long)opg);
    if (dsize > pages * w->psize - PAGE_HDR)
      return damaged(w, "%s: a value of %llu bytes on %llu overflow pages", t->name, (unsigned long long)dsize,
                     (unsigned long long)pages);
    if (use_pages(w, opg, pages, t->name)) return 1;
    if (t->is_free_list) { /* a long free-list record: read it whole */
      uint8_t *run = malloc(PAGE_HDR + dsize);
      if (!run) return damaged(w, "out of memory");
      int rc = read_at(w, opg, run, PAGE_HDR + dsize) || check_free_record(w, t, run + PAGE_HDR, dsize);
      free(run);
      if (rc) return 1;
    }
  } else if (flags & F_SUBDATA) {
    if (dsize != DB_SIZE) return damaged(w, "main: a database record of %llu bytes", (unsigned long long)dsize);
    if (t->ndbs < MAX_NAMED_DBS && ksize < sizeof t->dbs[0].name) {
      named_db *d = &t->dbs[t->ndbs++];
      memcpy(d->name, node + NODE_HDR, ksize);
      d->name[ksize] = '\0';
      d->root = sk_le64_load(data + DB_ROOT);
      d->flags = le16(data + DB_FLAGS);
    }
  } else if (t->is_free_list) {
    if (check_free_record(w, t, data, dsize)) return 1;
  }
  return 0;
}

static int walk_page(walker *w, tree *t, uint64_t pgno, int depth) {
  if (depth >= MAX_DEPTH) return damaged(w, "%s: the tree is deeper than %d", t->name, MAX_DEPTH);
  if (use_pages(w, pgno, 1, t->name)) return 1;
  uint8_t *page = malloc(w->psize);
  extent *ext = NULL;
  if (!page) return damaged(w, "out of memory");
  int rc = read_at(w, pgno, page, w->psize);
  const unsigned flags = rc ? 0 : le16(page + 10), lower = rc ? 0 : le16(page + 12), upper = rc ? 0 : le16(page + 14);
  const unsigned nkeys = lower >= PAGE_HDR ? (lower - PAGE_HDR) / 2 : 0;
  if (rc) {
  } else if (sk_le64_load(page) != pgno) {
    rc = damaged(w, "%s: page %llu says it is page %llu", t->name, (unsigned long long)pgno,
                 (unsigned long long)sk_le64_load(page));
  } else if (flags != P_BRANCH && flags != P_LEAF) {
    rc = damaged(w, "%s: page %llu has flags 0x%x (not a branch or leaf)", t->name, (unsigned long long)pgno, flags);
  } else if (lower < PAGE_HDR || (lower - PAGE_HDR) % 2 || upper > w->psize || lower > upper || nkeys == 0) {
    rc = damaged(w, "%s: page %llu header (lower %u, upper %u)", t->name, (unsigned long long)pgno, lower, upper);
  } else if (!(ext = malloc(nkeys * sizeof *ext))) {
    rc = damaged(w, "out of memory");
  }
  const uint8_t *prev = NULL;
  unsigned prev_size = 0;
  for (unsigned i = 0; i < nkeys && !rc; i++) {
    const unsigned off = le16(page + PAGE_HDR + 2 * i);
    if (off < upper || off % 2 || off + NODE_HDR > w->psize) {
      rc = damaged(w, "%s: page %llu node %u at offset %u", t->name, (unsigned long long)pgno, i, off);
      break;
    }
    ext[i].start = off;
    const unsigned ksize = le16(page + off + 6);
    if (flags == P_LEAF) {
      rc = check_leaf_node(w, t, page, off, &ext[i]);
    } else if (ksize > MAX_KEY || NODE_HDR + ksize > w->psize - off) {
      rc = damaged(w, "%s: page %llu branch node %u", t->name, (unsigned long long)pgno, i);
    } else {
      ext[i].end = off + ((NODE_HDR + ksize + 1) & ~1u);
    }
    if (rc) break;
    /* Keys in order (a branch's first key is not used by LMDB). */
    const uint8_t *key = page + off + NODE_HDR;
    if ((flags == P_LEAF || i > 0) && t->integer_keys && ksize != 8)
      rc = damaged(w, "%s: a key of %u bytes", t->name, ksize);
    else if (prev && !key_less(t, prev, prev_size, key, ksize))
      rc = damaged(w, "%s: page %llu keys out of order", t->name, (unsigned long long)pgno);
    if (flags == P_LEAF || i > 0) {
      prev = key;
      prev_size = ksize;
    }
  }
  if (!rc) { /* nodes must not overlap (LMDB moves them around when it edits the page) */
    qsort(ext, nkeys, sizeof *ext, by_start);
    for (unsigned i = 1; i < nkeys && !rc; i++)
      if (ext[i].start < ext[i - 1].end) rc = damaged(w, "%s: page %llu nodes overlap", t->name, (unsigned long long)pgno);
  }
  if (!rc && flags == P_LEAF) {
    if (t->leaf_depth < 0) t->leaf_depth = depth;
    else if (t->leaf_depth != depth) rc = damaged(w, "%s: leaves at depths %d and %d", t->name, t->leaf_depth, depth);
  }
  for (unsigned i = 0; i < nkeys && !rc && flags == P_BRANCH; i++) {
    const uint8_t *node = page + le16(page + PAGE_HDR + 2 * i);
    const uint64_t child = (uint64_t)le16(node) | (uint64_t)le16(node + 2) << 16 | (uint64_t)le16(node + 4) << 32;
    rc = walk_page(w, t, child, depth + 1);
  }
  free(ext);
  free(page);
  return rc;
}

static int walk_tree(walker *w, tree *t, uint64_t root) {
  t->leaf_depth = -1;
  if (root == P_INVALID) return 0; /* an empty database */
  return walk_page(w, t, root, 0);
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* A database record of a meta page: the key and duplicate flags LMDB gives it (the free list's
 * record also keeps environment flags, such as MDB_NOSUBDIR, in the same field), a root inside
 * the file. */
#define DB_KEY_FLAGS 0x7eu /* REVERSEKEY, DUPSORT, INTEGERKEY, DUPFIXED, INTEGERDUP, REVERSEDUP */
static int check_meta_db(walker *w, const uint8_t *db, unsigned key_flags, const char *name, uint64_t last_pg) {
  const uint64_t root = sk_le64_load(db + DB_ROOT);
  if ((le16(db + DB_FLAGS) & DB_KEY_FLAGS) != key_flags)
    return damaged(w, "meta page: %s flags 0x%x", name, le16(db + DB_FLAGS));
  if (root != P_INVALID && (root < 2 || root > last_pg))
    return damaged(w, "meta page: %s root page %llu outside pages 2..%llu", name, (unsigned long long)root,
                   (unsigned long long)last_pg);
  return 0;
}

int sk_lmdb_check_meta(const char *path, char *why, size_t why_size) {
  why[0] = '\0';
  FILE *f = fopen(path, "rbe");
  if (!f) {
    snprintf(why, why_size, "%s: %s", path, strerror(errno));
    return -1;
  }
  walker w = {fileno(f), 0, 0, NULL, why, why_size};
  uint8_t meta[PAGE_HDR + 136];
  int rc = 0;
  size_t psize = 0;
  /* Meta page 0 says where meta page 1 is: its page size (the free list's md_pad). */
  for (int m = 0; m < 2 && !rc; m++) {
    w.psize = m ? psize : 1; /* read_at reads page m at m * psize */
    if (read_at(&w, (uint64_t)m, meta, sizeof meta)) {
      rc = -1; /* too short for LMDB, which says so */
      break;
    }
    const uint32_t page_size = sk_le32_load(meta + META_DBS);
    const uint64_t last_pg = sk_le64_load(meta + META_LAST_PG);
    if (sk_le32_load(meta + PAGE_HDR) != META_MAGIC || sk_le32_load(meta + PAGE_HDR + 4) != 1) {
      rc = -1; /* not LMDB's, or another version: mdb_env_open says so */
      snprintf(why, why_size, "not an LMDB 0.9 file");
    } else if (page_size < 512 || page_size > (1u << 16) || (page_size & (page_size - 1)) ||
               (m && page_size != psize)) {
      rc = damaged(&w, "meta page %d: page size %u", m, page_size);
    } else if (last_pg < 1) {
      rc = damaged(&w, "meta page %d: last page %llu", m, (unsigned long long)last_pg);
    } else {
      psize = page_size;
      rc = check_meta_db(&w, meta + META_DBS, MDB_INTEGERKEY_FLAG, "free list", last_pg) ||
           check_meta_db(&w, meta + META_DBS + DB_SIZE, 0, "main database", last_pg);
    }
  }
  fclose(f);
  return rc;
}

int sk_lmdb_check(struct MDB_env *env, struct MDB_txn *txn, char *why, size_t why_size) {
  why[0] = '\0';
  MDB_stat st;
  int fd, rc;
  if ((rc = mdb_env_get_fd(env, &fd)) != 0 || (rc = mdb_env_stat(env, &st)) != 0) {
    snprintf(why, why_size, "%s", mdb_strerror(rc));
    return -1;
  }
  walker w = {fd, st.ms_psize, 0, NULL, why, why_size};
  if (w.psize < 512 || w.psize > (1u << 16)) return damaged(&w, "page size %zu", w.psize);
  /* The meta page of this snapshot: the one with its transaction id (the other is older, or
   * newer when a writer committed since the snapshot began). */
  const uint64_t id = mdb_txn_id(txn);
  uint8_t meta[PAGE_HDR + 136];
  int found = 0;
  for (uint64_t m = 0; m < 2 && !found; m++) {
    if (read_at(&w, m, meta, sizeof meta)) return 1;
    found = sk_le32_load(meta + PAGE_HDR) == META_MAGIC && sk_le64_load(meta + META_TXNID) == id;
  }
  if (!found) {
    snprintf(why, why_size, "the snapshot's meta page was rewritten during the check");
    return -1;
  }
  w.last_pgno = sk_le64_load(meta + META_LAST_PG);
  struct stat fst;
  if (fstat(fd, &fst) != 0) {
    snprintf(why, why_size, "fstat: %s", strerror(errno));
    return -1;
  }
  if (w.last_pgno < 1 || w.last_pgno >= (uint64_t)fst.st_size / w.psize)
    return damaged(&w, "the meta page names page %llu as the last, the file has %llu", (unsigned long long)w.last_pgno,
                   (unsigned long long)((uint64_t)fst.st_size / w.psize));
  w.seen = calloc(w.last_pgno / 8 + 1, 1);
  if (!w.seen) {
    snprintf(why, why_size, "out of memory");
    return -1;
  }
  named_db dbs[MAX_NAMED_DBS];
  tree free_list = {"free list", 1, 1, 0, -1, NULL, 0, NULL, 0, 0};
  tree main_db = {"main", 0, 0, 1, -1, dbs, 0, NULL, 0, 0};
  int result = walk_tree(&w, &free_list, sk_le64_load(meta + META_DBS + DB_ROOT)) ||
               walk_tree(&w, &main_db, sk_le64_load(meta + META_DBS + DB_SIZE + DB_ROOT));
  for (int i = 0; i < main_db.ndbs && !result; i++) {
    tree t = {dbs[i].name, (dbs[i].flags & MDB_INTEGERKEY_FLAG) != 0, 0, 0, -1, NULL, 0, NULL, 0, 0};
    if (dbs[i].flags & ~MDB_INTEGERKEY_FLAG) result = damaged(&w, "database %s has flags 0x%x", dbs[i].name, dbs[i].flags);
    else result = walk_tree(&w, &t, dbs[i].root);
  }
  /* A free page that a tree still uses would be handed to the next writer and overwritten. */
  if (!result && free_list.nfree) {
    qsort(free_list.free_pages, free_list.nfree, sizeof *free_list.free_pages, cmp_u64);
    for (size_t i = 0; i < free_list.nfree && !result; i++) {
      const uint64_t p = free_list.free_pages[i];
      if (i && p == free_list.free_pages[i - 1]) result = damaged(&w, "free list: page %llu listed twice", (unsigned long long)p);
      else if (w.seen[p / 8] & (1u << (p % 8))) result = damaged(&w, "free list: page %llu is in use", (unsigned long long)p);
    }
  }
  free(free_list.free_pages);
  free(w.seen);
  return result ? 1 : 0;
}
