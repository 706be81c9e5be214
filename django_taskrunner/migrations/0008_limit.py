from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskrunner', '0007_workflow'),
    ]

    operations = [
        migrations.CreateModel(
            name='Limit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'limit',
                'verbose_name_plural': 'limits',
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
    ]
