//! Writes a sample partition directory (for checking files with Kafka's `kafka-dump-log`).
//! Usage: cargo run -p annal-log --example write_sample -- DIR [BATCHES]
fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: write_sample DIR [BATCHES]"));
    let batches: usize = args
        .next()
        .map_or(200, |n| n.parse().expect("BATCHES is a number"));
    let config = annal_log::LogConfig {
        segment_bytes: 64 * 1024,
        ..annal_log::LogConfig::default()
    };
    let mut log = annal_log::Log::open(&dir, config).expect("open log");
    for i in 0..batches {
        let key = format!("key-{i}");
        let values: Vec<String> = (0..5).map(|j| format!("value-{i}-{j}")).collect();
        let records: Vec<annal_log::batch::KeyValue> = values
            .iter()
            .map(|v| (Some(key.as_bytes()), Some(v.as_bytes())))
            .collect();
        let timestamps: Vec<i64> = (0..5)
            .map(|j| 1_700_000_000_000 + (i * 10 + j) as i64)
            .collect();
        let mut batch = annal_log::batch::build_batch(
            &records,
            &timestamps,
            annal_log::batch::ProducerFields::default(),
        );
        log.append(&mut batch, &annal_log::AppendOptions::default())
            .expect("append");
    }
    log.close().expect("close");
}
