/* probe.c: a shared object exporting a thread-local variable, as a Ruby C
   extension would. Built three ways by the tests:
     -DPROBE=rubyperf_tls_probe                 general-dynamic (__tls_get_addr)
     -DPROBE=... -mtls-dialect=gnu2             TLS descriptors
     -DPROBE=... -DPROBE_INITIAL_EXEC           initial-exec: static TLS once dlopen'ed */
#ifndef PROBE
#define PROBE rubyperf_tls_probe
#endif

#ifdef PROBE_INITIAL_EXEC
__attribute__((tls_model("initial-exec")))
#endif
__thread void *PROBE;

/* probe_set stores v in the calling thread's variable and returns its address. */
void **probe_set(void *v)
{
	PROBE = v;
	return &PROBE;
}
