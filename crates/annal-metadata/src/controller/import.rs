//! The one-time import of a single node's data directory into a new metadata log.
//!
//! Before Annal was a cluster, a single node kept its topics in `topics.json` and its producer ids in a
//! `producer-id-block` file. The first time such a directory starts as a one-voter cluster (zero
//! configuration does that), its metadata log is new and empty of topics, so the broker hands its local
//! topics to the controller, which writes them as ordinary records: TopicRecord, one PartitionRecord per
//! partition (led by the node itself, ISR = itself, leader epoch 0 as every batch it wrote says), its
//! ConfigRecords, and a ProducerIdsRecord above every id the node already handed out.
//!
//! Once, and only before anything else: the import runs only while no broker has ever registered in the log
//! (the node registers right after), and skips topics the image already holds, so a crash between the import
//! and the registration imports nothing twice.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Controller, WriteError};
use crate::records::{
    ConfigRecord, ConfigResourceType, MetadataRecord, PartitionRecord, ProducerIdsRecord,
    TopicRecord,
};

/// A topic as the single node's registry has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// What a single node's data directory holds outside the metadata log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleNodeImport {
    /// The node that led every partition (and will again).
    pub node_id: i32,
    pub topics: Vec<ImportedTopic>,
    /// Above every producer id the node handed out (its `producer-id-block`).
    pub next_producer_id: i64,
}

/// What [`Controller::import_single_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// The log already had registrations: it is not new, nothing was imported.
    LogInUse,
    /// Nothing to import (no local topics the image lacks, no producer ids above the image's).
    NothingToImport,
    /// Imported these topics (and the producer id floor) at this log offset.
    Imported { offset: u64, topics: Vec<String> },
}

impl Controller {
    /// Imports a single node's topics and producer ids into the metadata log, once (see the module docs).
    pub async fn import_single_node(
        &self,
        import: SingleNodeImport,
    ) -> Result<ImportOutcome, WriteError> {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        if !image.brokers.is_empty() {
            return Ok(ImportOutcome::LogInUse);
        }
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for topic in &import.topics {
            if image.topic_by_name(&topic.name).is_some() || image.topic_by_id(&topic.id).is_some()
            {
                continue;
            }
            assert!(
                topic.partitions > 0 && !topic.id.is_nil(),
                "a registered topic has partitions and an id"
            );
            records.push(MetadataRecord::Topic(TopicRecord {
                name: topic.name.clone(),
                topic_id: topic.id,
            }));
            for partition_id in 0..topic.partitions {
                let me = vec![import.node_id];
                records.push(MetadataRecord::Partition(PartitionRecord::new(
                    topic.id,
                    partition_id,
                    me.clone(),
                    me,
                    import.node_id,
                )));
            }
            for (name, value) in &topic.configs {
                records.push(MetadataRecord::Config(ConfigRecord {
                    resource_type: ConfigResourceType::Topic.id(),
                    resource_name: topic.name.clone(),
                    name: name.clone(),
                    value: Some(value.clone()),
                }));
            }
            topics.push(topic.name.clone());
        }
        if import.next_producer_id > image.next_producer_id {
            records.push(MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: import.node_id,
                broker_epoch: -1,
                next_producer_id: import.next_producer_id,
            }));
        }
        if records.is_empty() {
            return Ok(ImportOutcome::NothingToImport);
        }
        let offset = self.writer.write(records).await?;
        Ok(ImportOutcome::Imported { offset, topics })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::controller::{ControllerConfig, InMemoryWriter, MetadataWriter};
    use crate::image::MetadataImage;

    fn import(node_id: i32) -> SingleNodeImport {
        SingleNodeImport {
            node_id,
            topics: vec![
                ImportedTopic {
                    name: "orders".into(),
                    id: Uuid::from_u128(7),
                    partitions: 3,
                    configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
                },
                ImportedTopic {
                    name: "__consumer_offsets".into(),
                    id: Uuid::from_u128(8),
                    partitions: 2,
                    configs: BTreeMap::new(),
                },
            ],
            next_producer_id: 3000,
        }
    }

    #[tokio::test]
    async fn a_new_log_takes_the_single_node_topics_once() {
        let writer = Arc::new(InMemoryWriter::new(MetadataImage::new("c")));
        let controller = Controller::new(ControllerConfig::default(), writer.clone());

        let outcome = controller.import_single_node(import(1)).await.unwrap();
        let ImportOutcome::Imported { topics, .. } = outcome else {
            panic!("expected an import, got {outcome:?}");
        };
        assert_eq!(topics, ["orders", "__consumer_offsets"]);
        let image = writer.image();
        let orders = image.topic_by_name("orders").unwrap();
        assert_eq!(orders.id, Uuid::from_u128(7), "topic ids are kept");
        assert_eq!(orders.partitions.len(), 3);
        for p in orders.partitions.values() {
            assert_eq!(
                (p.leader, p.isr.clone(), p.replicas.clone()),
                (1, vec![1], vec![1])
            );
            assert_eq!(p.leader_epoch, 0);
        }
        assert_eq!(image.next_producer_id, 3000);

        // Again (a crash before the registration): nothing twice.
        let again = controller.import_single_node(import(1)).await.unwrap();
        assert_eq!(again, ImportOutcome::NothingToImport);
        assert_eq!(writer.log().len(), 1, "one batch in all");
    }
}
