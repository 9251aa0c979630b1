package dev.annal.interop;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real broker process for the tests, chosen by the environment (the same rules as tests/interop/brokers.py):
 * INTEROP_BOOTSTRAP=host:port (a running broker; restarts impossible), INTEROP_BROKER=kafka (Apache Kafka via
 * scripts/kafka/start.sh, to validate the tests), otherwise ANNAL_BIN (`annal serve`).
 */
public abstract class Broker implements AutoCloseable {
    protected final String host = "127.0.0.1";
    protected int port;

    public String bootstrap() {
        return host + ":" + port;
    }

    public String host() {
        return host;
    }

    public int port() {
        return port;
    }

    public boolean canRestart() {
        return false;
    }

    public abstract void start() throws Exception;

    /** Stops with SIGTERM and waits (kill=false), or SIGKILL (kill=true). */
    public abstract void stop(boolean kill) throws Exception;

    public void restart(boolean kill) throws Exception {
        stop(kill);
        start();
    }

    @Override
    public void close() throws Exception {
        stop(false);
    }

    public static Broker create() throws Exception {
        String external = System.getenv("INTEROP_BOOTSTRAP");
        if (external != null && !external.isEmpty()) {
            return new External(external);
        }
        Path workdir = Files.createTempDirectory("annal-interop-java-");
        Broker b;
        if ("kafka".equals(System.getenv("INTEROP_BROKER"))) {
            b = new KafkaProcess(workdir);
        } else {
            String bin = System.getenv("ANNAL_BIN");
            if (bin == null || !new File(bin).canExecute()) {
                throw new IllegalStateException(
                        "set ANNAL_BIN to the annal binary (or INTEROP_BOOTSTRAP=host:port, or INTEROP_BROKER=kafka)");
            }
            b = new Annal(bin, workdir);
        }
        try {
            b.start();
        } catch (Exception | Error e) {
            try {
                b.close();
            } catch (Throwable closeError) {
                e.addSuppressed(closeError);
            }
            throw e;
        }
        return b;
    }

    /**
     * Test brokers' ports come from below the kernel's ephemeral range: a port from {@code new ServerSocket(0)} is an
     * ephemeral one, which any outgoing connection may take as its local port before the broker binds it (the Python
     * harness lost a cluster to that in CI). No port is handed out twice by one JVM.
     */
    private static final int PORT_FLOOR = 10000;
    private static final java.util.Set<Integer> HANDED_OUT = new java.util.HashSet<>();
    private static final java.util.Random PORT_RNG = new java.util.Random(ProcessHandle.current().pid() ^ System.nanoTime());

    static synchronized int freePort(int consecutive) throws IOException {
        int ceiling = ephemeralFloor();
        if (ceiling - consecutive <= PORT_FLOOR) {
            throw new IOException("the ephemeral port range starts at " + ceiling + ": no room below it for test brokers");
        }
        for (int attempt = 0; attempt < 1000; attempt++) {
            int port = PORT_FLOOR + PORT_RNG.nextInt(ceiling - consecutive + 1 - PORT_FLOOR);
            boolean ok = true;
            for (int i = 0; ok && i < consecutive; i++) {
                ok = !HANDED_OUT.contains(port + i) && bindable(port + i);
            }
            if (ok) {
                for (int i = 0; i < consecutive; i++) {
                    HANDED_OUT.add(port + i);
                }
                return port;
            }
        }
        throw new IOException("no run of " + consecutive + " free loopback ports below " + ceiling);
    }

    private static int ephemeralFloor() {
        try {
            // Not Files.readString: procfs reports a size of 0 and readString then returns a truncated read.
            String range;
            try (InputStream in = Files.newInputStream(Path.of("/proc/sys/net/ipv4/ip_local_port_range"))) {
                range = new String(in.readAllBytes(), StandardCharsets.US_ASCII).trim();
            }
            return Integer.parseInt(range.split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            return 32768; // Linux's default
        }
    }

    private static boolean bindable(int port) {
        try (ServerSocket s = new ServerSocket(port, 1, java.net.InetAddress.getLoopbackAddress())) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** True when the broker answers an ApiVersions v0 request: it is serving, not just listening. */
    static boolean answersApiVersions(String host, int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 1000);
            s.setSoTimeout(2000);
            byte[] clientId = "interop-probe".getBytes(StandardCharsets.UTF_8);
            ByteBuffer req = ByteBuffer.allocate(4 + 10 + clientId.length);
            req.putInt(10 + clientId.length).putShort((short) 18).putShort((short) 0).putInt(7)
                    .putShort((short) clientId.length).put(clientId);
            OutputStream out = s.getOutputStream();
            out.write(req.array());
            out.flush();
            InputStream in = s.getInputStream();
            byte[] head = in.readNBytes(8);
            return head.length == 8 && ByteBuffer.wrap(head).getInt(4) == 7;
        } catch (IOException e) {
            return false;
        }
    }

    static void deleteTree(Path dir) {
        try (Stream<Path> walk = Files.walk(dir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort: a temp dir
        }
    }

    static final class External extends Broker {
        External(String bootstrap) {
            int colon = bootstrap.lastIndexOf(':');
            if (!bootstrap.substring(0, colon).equals(host)) {
                throw new IllegalArgumentException("INTEROP_BOOTSTRAP must be on 127.0.0.1, got " + bootstrap);
            }
            port = Integer.parseInt(bootstrap.substring(colon + 1));
        }

        @Override
        public void start() {}

        @Override
        public void stop(boolean kill) {}
    }

    static final class Annal extends Broker {
        private final String bin;
        private final Path workdir;
        private Process proc;

        Annal(String bin, Path workdir) throws IOException {
            this.bin = bin;
            this.workdir = workdir;
            this.port = freePort(1);
        }

        @Override
        public boolean canRestart() {
            return true;
        }

        @Override
        public void start() throws Exception {
            File log = workdir.resolve("annal.log").toFile();
            proc = new ProcessBuilder(bin, "serve", "--data-dir", workdir.resolve("data").toString(),
                    "--listen", bootstrap())
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (System.nanoTime() < deadline) {
                if (!proc.isAlive()) {
                    throw new IllegalStateException("annal serve exited with " + proc.exitValue()
                            + " during start-up:\n" + tail(log));
                }
                if (answersApiVersions(host, port)) {
                    return;
                }
                Thread.sleep(100);
            }
            throw new IllegalStateException("annal serve did not answer on " + bootstrap() + ":\n" + tail(log));
        }

        @Override
        public void stop(boolean kill) throws Exception {
            if (proc == null) {
                return;
            }
            if (kill) {
                proc.destroyForcibly(); // SIGKILL
                proc.waitFor();
            } else {
                proc.destroy(); // SIGTERM
                if (!proc.waitFor(30, TimeUnit.SECONDS)) {
                    proc.destroyForcibly();
                    throw new AssertionError("annal did not exit within 30 s of SIGTERM");
                }
                if (proc.exitValue() != 0) {
                    throw new AssertionError("annal exited with " + proc.exitValue() + " after SIGTERM:\n"
                            + tail(workdir.resolve("annal.log").toFile()));
                }
            }
            proc = null;
        }

        @Override
        public void close() throws Exception {
            try {
                stop(false);
            } finally {
                deleteTree(workdir);
            }
        }

        static String tail(File log) {
            try {
                List<String> lines = Files.readAllLines(log.toPath());
                return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
            } catch (IOException e) {
                return "(no log)";
            }
        }
    }

    static final class KafkaProcess extends Broker {
        private final Path workdir;
        private final Path scripts;
        private boolean running;

        KafkaProcess(Path workdir) throws IOException {
            this.workdir = workdir;
            this.port = freePort(2);
            this.scripts = Path.of(System.getProperty("interop.repo", "../../..")).resolve("scripts/kafka");
        }

        @Override
        public boolean canRestart() {
            return true;
        }

        private void run(String... cmd) throws Exception {
            List<String> args = new ArrayList<>(List.of(cmd));
            Process p = new ProcessBuilder(args).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.INHERIT).start();
            if (!p.waitFor(180, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IllegalStateException(String.join(" ", cmd) + " failed");
            }
        }

        @Override
        public void start() throws Exception {
            run(scripts.resolve("start.sh").toString(), workdir.toString(), Integer.toString(port));
            running = true;
        }

        @Override
        public void stop(boolean kill) throws Exception {
            if (!running) {
                return;
            }
            if (kill) {
                run(scripts.resolve("stop.sh").toString(), workdir.toString(), "--kill");
            } else {
                run(scripts.resolve("stop.sh").toString(), workdir.toString());
            }
            running = false;
        }

        @Override
        public void close() throws Exception {
            try {
                stop(false);
            } finally {
                deleteTree(workdir);
            }
        }
    }
}
