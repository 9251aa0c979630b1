package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Topics, configs and acknowledged records survive a clean restart (SIGTERM) and kill -9. */
class RestartTest {

    static List<String> produce(Broker b, String topic, int partition, int n, String tag) throws Exception {
        List<String> values = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(b, Map.of(ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd", ProducerConfig.LINGER_MS_CONFIG, 5))) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String v = tag + "-p" + partition + "-" + i;
                values.add(v);
                fs.add(p.send(new ProducerRecord<>(topic, partition, null, Clients.bytes(v))));
            }
            p.flush();
            for (var f : fs) {
                f.get(30, TimeUnit.SECONDS); // acknowledged before the restart
            }
        }
        return values;
    }

    @ParameterizedTest(name = "kill={0}")
    @ValueSource(booleans = {false, true})
    void topicsConfigsAndRecordsSurviveRestart(boolean kill) throws Exception {
        Assumptions.assumeFalse(System.getenv("INTEROP_BOOTSTRAP") != null,
                "needs a broker process of its own; INTEROP_BOOTSTRAP points at an external broker");
        try (Broker b = Broker.create()) {
            Clients.createTopic(b, "persist-j", 2, Map.of("retention.ms", "86400000", "segment.bytes", "2097152"));
            Clients.createTopic(b, "doomed-j", 1, Map.of());
            List<String> p0 = produce(b, "persist-j", 0, 300, "before");
            List<String> p1 = produce(b, "persist-j", 1, 200, "before");
            try (Admin admin = Clients.admin(b)) {
                admin.deleteTopics(List.of("doomed-j")).all().get(30, TimeUnit.SECONDS);
            }

            b.restart(kill);

            try (Admin admin = Clients.admin(b)) {
                Clients.waitForLeaders(admin, "persist-j", 2);
                assertFalse(admin.listTopics().names().get().contains("doomed-j"), "deleted topic came back");
                ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, "persist-j");
                Config c = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
                assertEquals("86400000", c.get("retention.ms").value());
                assertEquals("2097152", c.get("segment.bytes").value());
            }
            check(b, "persist-j", 0, p0);
            check(b, "persist-j", 1, p1);

            // New records continue the offsets.
            List<String> more = produce(b, "persist-j", 0, 10, "after");
            List<String> all = new ArrayList<>(p0);
            all.addAll(more);
            check(b, "persist-j", 0, all);
        }
    }

    static void check(Broker b, String topic, int partition, List<String> want) {
        List<ConsumerRecord<byte[], byte[]>> got = Clients.consume(b, topic, partition, -1, want.size());
        for (int i = 0; i < want.size(); i++) {
            assertEquals(i, got.get(i).offset());
            assertEquals(want.get(i), Clients.str(got.get(i).value()), "partition " + partition + " offset " + i);
        }
        assertTrue(got.size() == want.size());
    }
}
