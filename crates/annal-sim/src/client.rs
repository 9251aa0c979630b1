//! A Kafka-protocol client of the controller listener over simulated TCP: finds the active controller among
//! the voters and sends it one request at a time, as a broker's controller channel does.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::TcpStream;

/// Kafka's NOT_CONTROLLER.
pub const NOT_CONTROLLER: i16 = 41;
/// A request that gets no answer within this long is abandoned (and its connection with it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest response accepted.
const RESPONSE_BYTES_MAX: usize = 1 << 20;

/// Why a request got no answer: the exchange failed or timed out (the write may or may not have happened).
#[derive(Debug)]
pub struct NoAnswer(pub String);

/// A connection to one voter at a time; [`ControllerChannel::next_voter`] moves on.
pub struct ControllerChannel {
    voters: Vec<String>,
    current: usize,
    stream: Option<TcpStream>,
    correlation_id: i32,
}

impl ControllerChannel {
    /// `voters`: "host:port" of each voter's controller listener.
    pub fn new(voters: Vec<String>, start: usize) -> ControllerChannel {
        let current = start % voters.len().max(1);
        ControllerChannel {
            voters,
            current,
            stream: None,
            correlation_id: 0,
        }
    }

    /// The voter this channel sends to.
    pub fn voter(&self) -> &str {
        &self.voters[self.current]
    }

    /// Drops the connection and sends to the next voter from now on (after NOT_CONTROLLER or no answer).
    pub fn next_voter(&mut self) {
        self.stream = None;
        self.current = (self.current + 1) % self.voters.len();
    }

    /// Sends `request` as `key` v`version` and decodes the answer.
    pub async fn send<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, NoAnswer>
    where
        Req: Encodable,
        Resp: Decodable + Message,
    {
        let result = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(key, version, request))
            .await
            .unwrap_or_else(|_| Err(NoAnswer(format!("no answer within {REQUEST_TIMEOUT:?}"))));
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, NoAnswer>
    where
        Req: Encodable,
        Resp: Decodable + Message,
    {
        let fail = |what: &str, e: &dyn std::fmt::Display| NoAnswer(format!("{what}: {e}"));
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.voters[self.current].as_str())
                .await
                .map_err(|e| fail("connect", &e))?;
            self.stream = Some(stream);
        }
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let correlation_id = self.correlation_id;
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("annal-sim")))
            .encode(&mut frame, key.request_header_version(version))
            .map_err(|e| fail("encode the request header", &e))?;
        request
            .encode(&mut frame, version)
            .map_err(|e| fail("encode the request", &e))?;
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        let Some(stream) = self.stream.as_mut() else {
            return Err(NoAnswer("not connected".into()));
        };
        stream
            .write_all(&frame)
            .await
            .map_err(|e| fail("write", &e))?;
        let size = stream.read_i32().await.map_err(|e| fail("read", &e))?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| NoAnswer(format!("response size {size} out of bounds")))?;
        let mut body = vec![0; size];
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| fail("read", &e))?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| fail("decode the response header", &e))?;
        if header.correlation_id != correlation_id {
            return Err(NoAnswer(format!(
                "response to correlation id {}, expected {correlation_id}",
                header.correlation_id
            )));
        }
        let response = Resp::decode(&mut body, version).map_err(|e| fail("decode", &e))?;
        if body.has_remaining() {
            return Err(NoAnswer(format!(
                "{} bytes after the response",
                body.remaining()
            )));
        }
        Ok(response)
    }
}
