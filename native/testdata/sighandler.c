// A program that spends much of its time in a signal handler, deep in
// both the handler and the code it interrupted: samples there unwind
// through the kernel's signal frame (glibc's __restore_rt). Argument:
// seconds to run.
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) static void spin(long n)
{
	for (volatile long i = 0; i < n; i++)
		sink += i;
}

__attribute__((noinline)) static void deep(int d, long n)
{
	if (d == 0) {
		spin(n);
		return;
	}
	deep(d - 1, n);
	sink++;
}

static void handler(int sig)
{
	(void)sig;
	deep(20, 2000000);
}

int main(int argc, char **argv)
{
	struct sigaction sa = {0};
	sa.sa_handler = handler;
	sigaction(SIGPROF, &sa, 0);
	struct itimerval it = {{0, 5000}, {0, 5000}};
	setitimer(ITIMER_PROF, &it, 0);
	time_t end = time(0) + (argc > 1 ? atoi(argv[1]) : 2);
	while (time(0) < end)
		deep(30, 1000);
	return 0;
}
