// Word count with Kafka Streams for tests/interop/test_streams_eos.py, run as a single-file source program
// (`java -cp <kafka-streams classpath> WordCount.java <properties file>`). The topology is Kafka's WordCountDemo:
// lines of the input topic split into lowercase words, counted per word, each new count written to the output
// topic (String key, Long value). Every setting (bootstrap.servers, processing.guarantee, topics) comes from the
// properties file; it runs until it is killed, printing "STATE <state>" on every state change.
import java.io.FileInputStream;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Produced;

public class WordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        props.putIfAbsent(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        props.putIfAbsent(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        props.putIfAbsent(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.putIfAbsent("consumer.auto.offset.reset", "earliest");
        String input = props.getProperty("wordcount.input");
        String output = props.getProperty("wordcount.output");

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split(" ")))
            .groupBy((k, word) -> word)
            .count()
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
