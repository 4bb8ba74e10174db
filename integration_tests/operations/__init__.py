"""Operations and failures around a running query: inspect and resolve, a quiet stop, a kill
at the first offsets, broker clusters restarted and partitioned, object storage that fails;
and the 3-node cluster and network namespaces those tests stand on."""
