//! FindCoordinator, DescribeGroups of unknown groups, ListGroups type filters, and the advertised versions.

use crate::group_support;

use annal_broker::group::{GroupCoordinator, NodeInfo};
use group_support::*;
use kafka_protocol::messages::*;

const COORDINATOR_NOT_AVAILABLE: i16 = 15;

fn node() -> NodeInfo {
    NodeInfo {
        node_id: 7,
        host: "127.0.0.1".into(),
        port: 19099,
    }
}

#[tokio::test]
async fn find_coordinator_answers_this_node_for_group_keys_in_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    for v in 0..=3 {
        let req = FindCoordinatorRequest::default().with_key(s("my-group"));
        let resp = answer(c.find_coordinator(wire(req, v), v, &node()), v);
        assert_eq!(
            (
                resp.error_code,
                resp.node_id.0,
                resp.host.as_str(),
                resp.port
            ),
            (NONE, 7, "127.0.0.1", 19099),
            "v{v}"
        );
    }
    for v in 4..=6 {
        let req = FindCoordinatorRequest::default().with_coordinator_keys(vec![s("a"), s("b")]);
        let resp = answer(c.find_coordinator(wire(req, v), v, &node()), v);
        assert_eq!(resp.coordinators.len(), 2);
        for (k, co) in ["a", "b"].iter().zip(&resp.coordinators) {
            assert_eq!(
                (co.key.as_str(), co.error_code, co.node_id.0, co.port),
                (*k, NONE, 7, 19099)
            );
        }
        // Transaction coordinator keys are not this coordinator's business.
        let req = FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![s("txn")]);
        let resp = answer(c.find_coordinator(wire(req, v), v, &node()), v);
        assert_eq!(resp.coordinators[0].error_code, COORDINATOR_NOT_AVAILABLE);
    }
}

#[tokio::test]
async fn unknown_groups_describe_as_dead_and_list_filters_by_type() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    for v in 0..=6 {
        let req = DescribeGroupsRequest::default().with_groups(vec![s("nope").into()]);
        let resp = answer(c.describe_groups(wire(req, v), v).await, v);
        let g = &resp.groups[0];
        assert_eq!(g.group_state.as_str(), "Dead", "v{v}");
        assert_eq!(
            g.error_code,
            if v >= 6 { GROUP_ID_NOT_FOUND } else { NONE },
            "v{v}"
        );
    }
    commit(&c, "simple", -1, "", &[("t", 0, 1, None)], 9).await;
    let by_type = |types: Vec<&str>| {
        let req =
            ListGroupsRequest::default().with_types_filter(types.into_iter().map(s).collect());
        wire(req, 5)
    };
    assert_eq!(
        answer(c.list_groups(by_type(vec!["classic"]), 5).await, 5)
            .groups
            .len(),
        1
    );
    assert_eq!(
        answer(c.list_groups(by_type(vec!["consumer"]), 5).await, 5)
            .groups
            .len(),
        0
    );
    for v in 0..=5 {
        let resp = answer(
            c.list_groups(wire(ListGroupsRequest::default(), v), v)
                .await,
            v,
        );
        assert_eq!(resp.groups[0].group_id.0.as_str(), "simple", "v{v}");
    }
}

#[test]
fn advertised_versions_are_within_what_the_codec_supports() {
    use kafka_protocol::messages::ApiKey;
    for &(key, min, max) in GroupCoordinator::api_versions() {
        let api = ApiKey::try_from(key).expect("known api key");
        let range = api.valid_versions();
        assert!(
            min >= range.min && max <= range.max,
            "{api:?} {min}-{max} outside {range:?}"
        );
        assert!(GroupCoordinator::handles(key));
    }
    assert!(
        !GroupCoordinator::handles(0),
        "Produce is not the coordinator's"
    );
}
