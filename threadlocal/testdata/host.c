/* host.c: dlopens the shared objects named on its command line once told to,
   so their TLS is set up after start (not in static TLS at a fixed offset
   unless they ask for it), and sets their variables in two threads.

   Prints, one line each:
     pid PID
     idle TID            a thread that never touches the variables (3: main,
                         one started before the dlopen, one after)
     waiting             then reads a line ("load") from stdin
     set LIB TID ADDR VALUE   for each object LIB (0-based) and setter thread
     ready               then waits until stdin closes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAXLIBS 8

typedef void **(*set_fn)(void *);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int loaded, done, idled, nlibs;
static set_fn sets[MAXLIBS];

/* say prints one line; the caller holds mu. */
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static void *idle(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	say("idle %ld\n", (long)gettid());
	idled++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (;;)
		pause();
	return NULL;
}

/* await waits until *n reaches want. */
static void await(int *n, int want)
{
	pthread_mutex_lock(&mu);
	while (*n < want)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

static void *setter(void *arg)
{
	uintptr_t base = (uintptr_t)arg;
	pthread_mutex_lock(&mu);
	while (!loaded)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < nlibs; i++) {
		void *v = (void *)(base + (uintptr_t)i);
		void **p = sets[i](v);
		pthread_mutex_lock(&mu);
		say("set %d %ld %p %p\n", i, (long)gettid(), (void *)p, v);
		pthread_mutex_unlock(&mu);
	}
	pthread_mutex_lock(&mu);
	done++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (;;)
		pause();
	return NULL;
}

static void start(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	if (pthread_create(&t, NULL, fn, arg) != 0) {
		perror("pthread_create");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	char line[64];

	if (argc - 1 > MAXLIBS) {
		fprintf(stderr, "at most %d objects\n", MAXLIBS);
		return 2;
	}
	pthread_mutex_lock(&mu);
	say("pid %ld\n", (long)getpid());
	say("idle %ld\n", (long)gettid());
	pthread_mutex_unlock(&mu);
	start(idle, NULL);
	start(setter, (void *)(uintptr_t)0x1111111111110000ULL);
	start(setter, (void *)(uintptr_t)0x2222222222220000ULL);
	await(&idled, 1);
	pthread_mutex_lock(&mu);
	say("waiting\n");
	pthread_mutex_unlock(&mu);
	if (!fgets(line, sizeof line, stdin))
		return 0;

	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		sets[nlibs] = (set_fn)dlsym(h, "probe_set");
		if (!sets[nlibs]) {
			fprintf(stderr, "dlsym: %s\n", dlerror());
			return 1;
		}
		nlibs++;
	}
	start(idle, NULL);

	pthread_mutex_lock(&mu);
	loaded = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	await(&done, 2);
	await(&idled, 2);
	pthread_mutex_lock(&mu);
	say("ready\n");
	pthread_mutex_unlock(&mu);

	while (fgets(line, sizeof line, stdin))
		;
	return 0;
}
