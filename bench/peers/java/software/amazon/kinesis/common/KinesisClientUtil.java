/*
 * A stand-in for KCL 3.1.3's own software.amazon.kinesis.common.KinesisClientUtil, put ahead
 * of KCL's jar on the classpath by `make bench-peers`. It builds the same Netty client with
 * the same concurrency, over HTTP/1.1 instead of HTTP/2, because the Kinesis emulator
 * (kinesalite) speaks HTTP/1.1 only and KCL offers no setting for the protocol.
 *
 * This is a transport change, not a tuning: nothing else of KCL's behaviour changes.
 * The original (Apache-2.0) builds the client with
 * .http2Configuration(initialWindowSize 512 KiB, healthCheckPingPeriod 60 s).protocol(HTTP2).
 */
package software.amazon.kinesis.common;

import software.amazon.awssdk.http.Protocol;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClientBuilder;

public class KinesisClientUtil {

    public static KinesisAsyncClient createKinesisAsyncClient(KinesisAsyncClientBuilder clientBuilder) {
        return adjustKinesisClientBuilder(clientBuilder).build();
    }

    public static KinesisAsyncClientBuilder adjustKinesisClientBuilder(KinesisAsyncClientBuilder builder) {
        return builder.httpClientBuilder(NettyNioAsyncHttpClient.builder()
                .maxConcurrency(Integer.MAX_VALUE)
                .protocol(Protocol.HTTP1_1));
    }
}
