// A small multi-threaded MariaDB load client (libmariadb), pgbench's role for MariaDB.
// cc -O2 -o client client.c $(mariadb_config --cflags --libs) -lpthread
// client HOST PORT USER DB THREADS SECONDS MODE
//   bench: START TRANSACTION; INSERT one comment on 1 of 5 hot posts; sleep 2 ms; COMMIT
//   mix:   one autocommit statement of a random kind (insert, delete, move, flip, multi-row)
//   probe: one multi-row INSERT of 50 rows, parents in random order (deadlock probe 1)
//   probe2: two small inserts in one transaction (deadlock probe 2)
//   bulk:  one INSERT ... SELECT of 100,000 rows (THREADS must be 1), prints its ms
// Prints: "tps=... tx=... errors: code=count ..."
#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *host, *user, *db, *mode;
static int port, seconds;
static volatile int stop;
#define MAXERR 8
typedef struct { long tx; unsigned codes[MAXERR]; long counts[MAXERR]; unsigned seed; } stats_t;

static void err(stats_t *s, unsigned code) {
  for (int i = 0; i < MAXERR; i++) {
    if (s->codes[i] == code || s->codes[i] == 0) { s->codes[i] = code; s->counts[i]++; return; }
  }
}
static int q(MYSQL *c, stats_t *s, const char *sql) {
  if (mysql_query(c, sql)) { err(s, mysql_errno(c)); return 1; }
  MYSQL_RES *r = mysql_store_result(c); if (r) mysql_free_result(r);
  return 0;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void *run(void *arg) {
  stats_t *s = arg;
  MYSQL *c = mysql_init(NULL);
  if (!mysql_real_connect(c, host, user, "", db, port, NULL, 0)) { fprintf(stderr, "connect: %s\n", mysql_error(c)); exit(1); }
  char sql[1024];
  while (!stop) {
    int p = 1 + rand_r(&s->seed) % 5, a = 1 + rand_r(&s->seed) % 1000;
    if (!strcmp(mode, "bench")) {
      if (q(c, s, "START TRANSACTION")) continue;
      snprintf(sql, sizeof sql, "INSERT INTO comments (post_id, author_id, local, score) VALUES (%d, %d, 1, 1)", p, a);
      if (q(c, s, sql)) { q(c, s, "ROLLBACK"); continue; }
      usleep(2000);
      if (q(c, s, "COMMIT")) continue;
    } else if (!strcmp(mode, "mix")) {
      int op = 1 + rand_r(&s->seed) % 8, q6 = 1 + rand_r(&s->seed) % 6, a50 = 1 + rand_r(&s->seed) % 50;
      switch (op) {
      case 1: snprintf(sql, sizeof sql, "INSERT INTO comments (post_id, author_id, local, score) VALUES (%d, %d, %d, 1)", p, a50, rand_r(&s->seed) % 2); break;
      case 2: snprintf(sql, sizeof sql, "DELETE FROM comments WHERE post_id = %d ORDER BY id DESC LIMIT 2", p); break;
      case 3: snprintf(sql, sizeof sql, "UPDATE comments SET post_id = %d WHERE post_id = %d LIMIT 2", q6, p); break;
      case 4: snprintf(sql, sizeof sql, "UPDATE comments SET deleted = NOT deleted WHERE post_id = %d ORDER BY id DESC LIMIT 1", p); break;
      case 5: snprintf(sql, sizeof sql, "UPDATE comments SET score = score + 1, removed = RAND() < 0.2 WHERE post_id = %d ORDER BY id LIMIT 1", p); break;
      case 6: snprintf(sql, sizeof sql, "INSERT INTO comments (post_id, author_id, local, score) SELECT NULLIF(1 + FLOOR(RAND() * 7), 7), 1 + FLOOR(RAND() * 50), RAND() < 0.5, FLOOR(RAND() * 5) - 2 FROM seq_1_to_20 ORDER BY RAND()"); break;
      case 7: snprintf(sql, sizeof sql, "DELETE FROM comments WHERE post_id = %d AND id %% 10 = %d", q6, a50 % 10); break;
      default: snprintf(sql, sizeof sql, "UPDATE comments SET post_id = NULL WHERE post_id = %d ORDER BY id LIMIT 1", q6); break;
      }
      if (q(c, s, sql)) continue;
    } else if (!strcmp(mode, "probe")) {
      if (q(c, s, "INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + FLOOR(RAND() * 10), 1 + FLOOR(RAND() * 10), 1, 1 FROM seq_1_to_50 ORDER BY RAND()")) continue;
    } else if (!strcmp(mode, "probe2")) {
      int p2 = 1 + rand_r(&s->seed) % 10, q2 = 1 + rand_r(&s->seed) % 10;
      if (q(c, s, "START TRANSACTION")) continue;
      snprintf(sql, sizeof sql, "INSERT INTO comments (post_id, author_id, local, score) VALUES (%d, 1, 1, 1), (%d, 2, 1, 1)", p2, p2);
      if (q(c, s, sql)) { q(c, s, "ROLLBACK"); continue; }
      snprintf(sql, sizeof sql, "INSERT INTO comments (post_id, author_id, local, score) VALUES (%d, 3, 1, 1)", q2);
      if (q(c, s, sql)) { q(c, s, "ROLLBACK"); continue; }
      if (q(c, s, "COMMIT")) continue;
    } else if (!strcmp(mode, "bulk")) {
      double t0 = now();
      if (q(c, s, "INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + seq % 5, 1 + seq % 1000, 1, 1 FROM seq_1_to_100000")) { fprintf(stderr, "bulk: %s\n", mysql_error(c)); }
      printf("bulk_ms=%.0f\n", (now() - t0) * 1000);
      s->tx++; break;
    }
    s->tx++;
  }
  mysql_close(c);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 8) { fprintf(stderr, "usage: client HOST PORT USER DB THREADS SECONDS MODE\n"); return 2; }
  host = argv[1]; port = atoi(argv[2]); user = argv[3]; db = argv[4];
  int n = atoi(argv[5]); seconds = atoi(argv[6]); mode = argv[7];
  mysql_library_init(0, NULL, NULL);
  pthread_t th[256]; stats_t st[256]; memset(st, 0, sizeof st);
  double t0 = now();
  for (int i = 0; i < n; i++) { st[i].seed = 12345 + i * 7919 + (unsigned)time(NULL); pthread_create(&th[i], NULL, run, &st[i]); }
  if (strcmp(mode, "bulk")) { sleep(seconds); stop = 1; }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  double el = now() - t0;
  stats_t tot; memset(&tot, 0, sizeof tot);
  for (int i = 0; i < n; i++) { tot.tx += st[i].tx; for (int j = 0; j < MAXERR; j++) if (st[i].codes[j]) for (long k = 0; k < st[i].counts[j]; k++) err(&tot, st[i].codes[j]); }
  printf("tps=%.1f tx=%ld errors:", tot.tx / el, tot.tx);
  for (int j = 0; j < MAXERR; j++) if (tot.codes[j]) printf(" %u=%ld", tot.codes[j], tot.counts[j]);
  printf("\n");
  return 0;
}
