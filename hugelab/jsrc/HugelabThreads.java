import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.CountDownLatch;
import javax.management.ObjectName;

/**
 * hugelab's many-threads program (the jvm kind's `threads`): starts THREADS threads, whose
 * stacks are the JVM's -Xss, each recursing through about TOUCH_KB of its own stack before it
 * parks. Once every thread has, it prints, at the same moment, the JVM's own Native Memory
 * Tracking summary (the VM.native_memory diagnostic command that jcmd sends, asked in-process;
 * the JVM must run with -XX:NativeMemoryTracking=summary) and /proc/self/smaps_rollup, then
 * keeps the threads parked HOLD_MS milliseconds (the time the trial's samplers see them) and
 * exits.
 *
 * Usage: java -XX:NativeMemoryTracking=summary -Xss<size> HugelabThreads THREADS TOUCH_KB HOLD_MS
 */
public final class HugelabThreads {
    /** About what one touch() frame takes (interpreted), so TOUCH_KB sets the depth. */
    private static final int FRAME_BYTES = 128;
    private static volatile long sink;

    private HugelabThreads() {
    }

    private static long touch(int depth, long x) {
        long a = x + 1;
        long b = a * 3;
        long c = b ^ a;
        long d = c + depth;
        if (depth <= 0) {
            return a + b + c + d;
        }
        return touch(depth - 1, d) + a;
    }

    private static String nativeMemory() throws Exception {
        return (String) ManagementFactory.getPlatformMBeanServer().invoke(
                new ObjectName("com.sun.management:type=DiagnosticCommand"), "vmNativeMemory",
                new Object[] {new String[] {"summary"}},
                new String[] {String[].class.getName()});
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: HugelabThreads THREADS TOUCH_KB HOLD_MS");
            System.exit(2);
        }
        int threads = Integer.parseInt(args[0]);
        int depth = Math.max(1, Integer.parseInt(args[1]) * 1024 / FRAME_BYTES);
        long holdMs = Long.parseLong(args[2]);
        CountDownLatch ready = new CountDownLatch(threads);
        CountDownLatch release = new CountDownLatch(1);
        long t0 = System.nanoTime();
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(() -> {
                sink += touch(depth, 1);
                ready.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "hugelab-" + i);
            t.setDaemon(true);
            t.start();
        }
        ready.await();
        double startMs = (System.nanoTime() - t0) / 1e6;
        String nmt = nativeMemory();
        String rollup = String.join("\n", Files.readAllLines(Paths.get("/proc/self/smaps_rollup")));
        System.out.println("hugelab-threads: pid " + ProcessHandle.current().pid());
        System.out.println("hugelab-threads: started " + threads + " threads in " + startMs
                + " ms");
        System.out.println("--- smaps_rollup\n" + rollup + "\n--- native memory\n" + nmt
                + "\n--- end");
        System.out.flush();
        Thread.sleep(holdMs);
        release.countDown();
        System.out.println("hugelab-threads: done");
    }
}
