package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Security with the unchanged Java kafka-clients (issue 17): SSL, mutual TLS, SASL_SSL with SCRAM-SHA-512 and
 * with PLAIN. Over each: admin (create a topic, describe it and the cluster), an idempotent acks=all producer, a
 * consumer group (subscribe, commit) and the group's offsets and state read back with the admin. One broker
 * (SecureBroker) serves every listener; INTEROP_BROKER=kafka runs the same class against Apache Kafka.
 */
@Tag("security")
class SecurityTest {
    static final int RECORDS = 20;
    static SecureBroker broker;

    @BeforeAll
    static void startBroker() throws Exception {
        String external = System.getenv("INTEROP_BOOTSTRAP");
        assumeTrue(external == null || external.isEmpty(),
                "starts its own broker with secured listeners; INTEROP_BOOTSTRAP is set");
        assumeTrue(onPath("openssl"), "the openssl CLI is needed to make test certificates");
        broker = new SecureBroker();
    }

    @AfterAll
    static void stopBroker() throws Exception {
        if (broker != null) {
            boolean alive = broker.alive();
            String tail = alive ? "" : broker.tail();
            broker.close();
            assertTrue(alive, "the broker died during the security tests:\n" + tail);
        }
    }

    static boolean onPath(String command) {
        String path = System.getenv().getOrDefault("PATH", "");
        return java.util.Arrays.stream(path.split(java.io.File.pathSeparator))
                .anyMatch(d -> new java.io.File(d, command).canExecute());
    }

    static Map<String, Object> tls() {
        Map<String, Object> c = new HashMap<>();
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SSL");
        c.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        c.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, broker.file("ca.pem").toString());
        return c;
    }

    static Map<String, Object> clientCertificate() {
        Map<String, Object> c = tls();
        c.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        c.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, broker.file("client.pem").toString());
        return c;
    }

    static Map<String, Object> saslSsl(String mechanism, String loginModule, String user, String password) {
        Map<String, Object> c = tls();
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        c.put(SaslConfigs.SASL_MECHANISM, mechanism);
        c.put(SaslConfigs.SASL_JAAS_CONFIG, loginModule + " required username=\"" + user + "\" password=\""
                + password + "\";");
        return c;
    }

    static Map<String, Object> scram(String user, String password) {
        return saslSsl("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule", user, password);
    }

    static Map<String, Object> plain(String user, String password) {
        return saslSsl("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule", user, password);
    }

    static Map<String, Object> on(String listener, Map<String, Object> security) {
        Map<String, Object> c = new HashMap<>(security);
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap(listener));
        return c;
    }

    /**
     * Over `listener` with `security`: creates a 2-partition topic and describes it and the cluster, produces
     * RECORDS records (idempotent, acks=all), consumes them in a group that commits, and reads the group's
     * committed offsets and state back with the admin.
     */
    static void roundTrip(String listener, Map<String, Object> security, String topic) throws Exception {
        Map<String, Object> common = on(listener, security);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get(30, TimeUnit.SECONDS);
            Clients.waitForLeaders(admin, topic, 2);
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS)
                    .get(topic);
            assertEquals(2, d.partitions().size(), d.toString());
            // Metadata answers with the endpoints of the listener the request came in on.
            List<Integer> ports = admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream()
                    .map(Node::port).toList();
            assertEquals(List.of(broker.ports.get(listener)), ports);

            Map<String, Object> pc = new HashMap<>(common);
            pc.put(ProducerConfig.ACKS_CONFIG, "all");
            pc.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
            pc.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
            Set<String> sent = new HashSet<>();
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pc)) {
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                for (int i = 0; i < RECORDS; i++) {
                    acks.add(p.send(new ProducerRecord<>(topic, i % 2, Clients.bytes("k" + i),
                            Clients.bytes("v" + i))));
                    sent.add("v" + i);
                }
                for (Future<RecordMetadata> f : acks) {
                    f.get(30, TimeUnit.SECONDS);
                }
            }

            String group = "g-" + topic;
            Map<String, Object> cc = new HashMap<>(common);
            cc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            cc.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            cc.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            cc.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            cc.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            Set<String> got = new HashSet<>();
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cc)) {
                c.subscribe(List.of(topic));
                long deadline = System.nanoTime() + Clients.TIMEOUT.toNanos();
                while (got.size() < RECORDS && System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(200)).forEach(r -> got.add(Clients.str(r.value())));
                }
                assertEquals(sent, got, "records consumed in group " + group);
                c.commitSync(Duration.ofSeconds(30));
            }
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            assertEquals(Map.of(new TopicPartition(topic, 0), (long) RECORDS / 2,
                            new TopicPartition(topic, 1), (long) RECORDS / 2),
                    offsets(committed), "committed offsets of " + group);
            ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(group)).all()
                    .get(30, TimeUnit.SECONDS).get(group);
            assertEquals(GroupState.EMPTY, g.groupState(), g.toString());
        }
    }

    static Map<TopicPartition, Long> offsets(Map<TopicPartition, OffsetAndMetadata> m) {
        Map<TopicPartition, Long> out = new HashMap<>();
        m.forEach((tp, o) -> out.put(tp, o.offset()));
        return out;
    }

    /** The cause of the failure of an admin call over `listener` with `security` (short timeouts). */
    static Throwable adminFailure(String listener, Map<String, Object> security) {
        Map<String, Object> c = on(listener, security);
        c.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 5000);
        c.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 10000);
        try (Admin admin = Admin.create(c)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.describeCluster().nodes().get(30, TimeUnit.SECONDS));
            return e.getCause();
        }
    }

    @Test
    void ssl() throws Exception {
        roundTrip("SSL", tls(), Clients.uniqueTopic("ssl"));
    }

    @Test
    void mutualTls() throws Exception {
        roundTrip("MTLS", clientCertificate(), Clients.uniqueTopic("mtls"));
    }

    @Test
    void mutualTlsWithoutClientCertificateIsRefused() {
        Throwable cause = adminFailure("MTLS", tls());
        assertInstanceOf(SslAuthenticationException.class, cause, String.valueOf(cause));
    }

    @Test
    void saslSslScramSha512() throws Exception {
        // The user is made as kafka-configs would, with AlterUserScramCredentials over the PLAINTEXT listener.
        try (Admin admin = Admin.create(on("PLAINTEXT", Map.of()))) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("alice",
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "alice-scram-secret")))
                    .all().get(30, TimeUnit.SECONDS);
            UserScramCredentialsDescription d = admin.describeUserScramCredentials(List.of("alice")).all()
                    .get(30, TimeUnit.SECONDS).get("alice");
            assertEquals(List.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)),
                    d.credentialInfos());
        }
        roundTrip("SASL_SSL", scram("alice", "alice-scram-secret"), Clients.uniqueTopic("scram"));
        Throwable cause = adminFailure("SASL_SSL", scram("alice", "wrong"));
        assertInstanceOf(SaslAuthenticationException.class, cause, String.valueOf(cause));
        cause = adminFailure("SASL_SSL", scram("nobody", "alice-scram-secret"));
        assertInstanceOf(SaslAuthenticationException.class, cause, String.valueOf(cause));
    }

    @Test
    void saslSslPlain() throws Exception {
        roundTrip("SASL_SSL", plain("alice", "alice-secret"), Clients.uniqueTopic("plain"));
        Throwable cause = adminFailure("SASL_SSL", plain("alice", "wrong"));
        assertInstanceOf(SaslAuthenticationException.class, cause, String.valueOf(cause));
    }
}
