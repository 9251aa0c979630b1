package dev.annal.interop;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * One broker with secured listeners (issue 17), Annal (`annal serve --config`) or Apache Kafka (`kafka.Kafka`,
 * INTEROP_BROKER=kafka) started from the same server.properties, as tests/interop/test_security.py does:
 * <pre>
 *   PLAINTEXT  inter-broker, and the admin that creates SCRAM users
 *   SSL        TLS, server certificate only
 *   MTLS       TLS with ssl.client.auth=required (listener.name.mtls.ssl.client.auth)
 *   SASL_SSL   SCRAM-SHA-512 (users made with AlterUserScramCredentials) and PLAIN (users in the JAAS config)
 * </pre>
 * Certificates are made with the openssl CLI in a temporary directory: a CA, a server certificate for
 * localhost/127.0.0.1 and a client certificate for CN=alice,OU=eng. Every store is PEM (ssl.keystore.type=PEM),
 * on both sides.
 */
final class SecureBroker implements AutoCloseable {
    static final List<String> LISTENERS = List.of("PLAINTEXT", "SSL", "MTLS", "SASL_SSL");
    static final String PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required "
            + "username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\";";
    static final String SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;";

    final Path dir;
    final boolean kafka;
    final Map<String, Integer> ports = new LinkedHashMap<>();
    private final int ctrlPort;
    private Process proc;

    SecureBroker() throws Exception {
        dir = Files.createTempDirectory("annal-interop-java-security-");
        kafka = "kafka".equals(System.getenv("INTEROP_BROKER"));
        try {
            makePki(dir);
            for (String l : LISTENERS) {
                ports.put(l, Broker.freePort(1));
            }
            ctrlPort = Broker.freePort(1);
            Path props = dir.resolve("server.properties");
            Files.writeString(props, serverProperties());
            start(props);
        } catch (Exception | Error e) {
            try {
                close();
            } catch (Throwable closeError) {
                e.addSuppressed(closeError);
            }
            throw e;
        }
    }

    String bootstrap(String listener) {
        return "127.0.0.1:" + ports.get(listener);
    }

    Path file(String name) {
        return dir.resolve(name);
    }

    boolean alive() {
        return proc != null && proc.isAlive();
    }

    static void run(Path cwd, String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(cwd.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(String.join(" ", cmd) + " failed:\n" + out);
        }
    }

    /** The same certificates as test_security.py's make_pki, plus client.pem (key + chain) for the Java client. */
    static void makePki(Path d) throws Exception {
        run(d, "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
                "-days", "2", "-subj", "/CN=annal-interop-ca");
        Files.writeString(d.resolve("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                + "extendedKeyUsage=serverAuth\n");
        run(d, "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr",
                "-subj", "/CN=localhost");
        run(d, "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-out", "server-cert.pem", "-days", "2", "-extfile", "server.ext");
        Files.writeString(d.resolve("client.ext"), "extendedKeyUsage=clientAuth\n");
        run(d, "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client-key.pem", "-out", "client.csr",
                "-subj", "/OU=eng/CN=alice");
        run(d, "openssl", "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-out", "client-cert.pem", "-days", "2", "-extfile", "client.ext");
        // openssl 3 writes PKCS#8 ("BEGIN PRIVATE KEY"), the unencrypted form both Kafka's and Annal's PEM
        // keystores read: key first, then the chain.
        String ca = Files.readString(d.resolve("ca.pem"));
        Files.writeString(d.resolve("server.pem"), Files.readString(d.resolve("server-key.pem"))
                + Files.readString(d.resolve("server-cert.pem")) + ca);
        Files.writeString(d.resolve("client.pem"), Files.readString(d.resolve("client-key.pem"))
                + Files.readString(d.resolve("client-cert.pem")) + ca);
    }

    private String serverProperties() {
        StringBuilder listeners = new StringBuilder();
        for (String l : LISTENERS) {
            listeners.append(listeners.length() == 0 ? "" : ",").append(l).append("://").append(bootstrap(l));
        }
        return String.join("\n", List.of(
                "process.roles=broker,controller",
                "node.id=1",
                "controller.quorum.voters=1@127.0.0.1:" + ctrlPort,
                "listeners=" + listeners + ",CONTROLLER://127.0.0.1:" + ctrlPort,
                "advertised.listeners=" + listeners,
                "inter.broker.listener.name=PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                        + "SASL_SSL:SASL_SSL",
                "log.dirs=" + dir.resolve("data"),
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "ssl.keystore.type=PEM",
                "ssl.keystore.location=" + dir.resolve("server.pem"),
                "ssl.truststore.type=PEM",
                "ssl.truststore.location=" + dir.resolve("ca.pem"),
                "listener.name.mtls.ssl.client.auth=required",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=" + SCRAM_JAAS,
                "listener.name.sasl_ssl.plain.sasl.jaas.config=" + PLAIN_JAAS,
                "sasl.enabled.mechanisms=PLAIN",
                ""));
    }

    /** Apache Kafka's broker classpath, from scripts/kafka/fetch.sh (Maven). */
    static String kafkaClasspath() throws Exception {
        Path scripts = Path.of(System.getProperty("interop.repo", "../../..")).resolve("scripts/kafka");
        Process p = new ProcessBuilder(scripts.resolve("fetch.sh").toString())
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (!p.waitFor(600, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException("scripts/kafka/fetch.sh failed");
        }
        String[] lines = out.split("\n");
        return Files.readString(Path.of(lines[lines.length - 1].trim())).trim();
    }

    private void start(Path props) throws Exception {
        List<String> cmd = new ArrayList<>();
        if (kafka) {
            List<String> java = List.of("java", "-Xms256m", "-Xmx512m", "-cp", kafkaClasspath());
            String clusterId = Base64.getUrlEncoder().withoutPadding().encodeToString(uuidBytes());
            List<String> format = new ArrayList<>(java);
            format.addAll(List.of("kafka.tools.StorageTool", "format", "-t", clusterId, "-c", props.toString()));
            run(dir, format.toArray(new String[0]));
            cmd.addAll(java);
            cmd.addAll(List.of("kafka.Kafka", props.toString()));
        } else {
            String bin = System.getenv("ANNAL_BIN");
            if (bin == null || !new File(bin).canExecute()) {
                throw new IllegalStateException("set ANNAL_BIN to the annal binary (or INTEROP_BROKER=kafka)");
            }
            cmd.addAll(List.of(bin, "serve", "--config", props.toString()));
        }
        File log = dir.resolve("broker.log").toFile();
        proc = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (System.nanoTime() < deadline) {
            if (!proc.isAlive()) {
                throw new IllegalStateException((kafka ? "kafka" : "annal") + " exited with " + proc.exitValue()
                        + " during start-up:\n" + tail());
            }
            if (Broker.answersApiVersions("127.0.0.1", ports.get("PLAINTEXT"))) {
                return;
            }
            Thread.sleep(100);
        }
        throw new IllegalStateException("the broker did not serve on " + bootstrap("PLAINTEXT") + ":\n" + tail());
    }

    private static byte[] uuidBytes() {
        UUID u = UUID.randomUUID();
        return java.nio.ByteBuffer.allocate(16).putLong(u.getMostSignificantBits())
                .putLong(u.getLeastSignificantBits()).array();
    }

    String tail() {
        return Broker.Annal.tail(dir.resolve("broker.log").toFile());
    }

    @Override
    public void close() throws Exception {
        try {
            if (proc != null && proc.isAlive()) {
                proc.destroy(); // SIGTERM
                if (!proc.waitFor(60, TimeUnit.SECONDS)) {
                    proc.destroyForcibly();
                    proc.waitFor();
                }
            }
        } finally {
            Broker.deleteTree(dir);
        }
    }
}
